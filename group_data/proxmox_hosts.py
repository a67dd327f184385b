"""The Proxmox host of the reference box (8x RTX PRO 6000 Blackwell, PCIe Gen5, no NVLink)."""

host_profile = "lxc-p2p"
boot_loader = "auto"
nvidia_driver_version = "590.48.01"
# Reboot only when you say so: a reboot stops every guest on the box.
allow_reboot = False
gpu_pci_ids = ["10de:2bb5"]
# The box's GPUs: no guest may ask for more.
gpu_count = 8
# lxc-p2p: the one LXC guest gets all 8 GPUs; no VM gets any (inventory/lab.py shows the
# kvm-vfio variant).
lxc_guests = [{"vmid": 201, "name": "llm-lxc"}]

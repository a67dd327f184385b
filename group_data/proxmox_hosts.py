"""The Proxmox host of the reference box (8x RTX PRO 6000 Blackwell, PCIe Gen5, no NVLink)."""

host_profile = "lxc-p2p"
boot_loader = "auto"
nvidia_driver_version = "590.48.01"
# Reboot only when you say so: a reboot stops every guest on the box.
allow_reboot = False
gpu_pci_ids = ["10de:2bb5"]
lxc_guests = [{"vmid": 201, "name": "llm-lxc"}]
kvm_guests = [{"vmid": 301, "name": "llm-vm", "pci_addresses": []}]

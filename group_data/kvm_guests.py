"""KVM serving guests: GPUs bound to vfio-pci on the host and passed through whole.

The group's defaults; inventory/lab.py has no VM (its host is lxc-p2p) and shows the kvm-vfio
variant, where the host's kvm_guests entry passes as many pci_addresses as gpu_count.
"""

host_profile = "kvm-vfio"
accelerator = "cuda"
gpu_count = 8
served_model = "kimi-k2.5-int4"
cuda = {"toolkit_version": "12.8", "driver_version": "590.48.01"}

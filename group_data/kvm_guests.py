"""KVM serving guests: GPUs bound to vfio-pci on the host and passed through whole."""

host_profile = "kvm-vfio"
accelerator = "cuda"
gpu_count = 8
served_model = "kimi-k2.5-int4"
cuda = {"toolkit_version": "12.8", "driver_version": "590.48.01"}

"""LXC serving guests on the reference box: 8 GPUs shared in, P2P over PCIe, Kimi-K2.5 INT4."""

host_profile = "lxc-p2p"
accelerator = "cuda"
gpu_count = 8
served_model = "kimi-k2.5-int4"
# The guest's userspace driver must equal the host's kernel module (NVML mismatch otherwise).
cuda = {"toolkit_version": "12.8", "driver_version": "590.48.01"}

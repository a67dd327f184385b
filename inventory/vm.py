"""A QEMU VM booted through GRUB (tests/vm/build_vm.sh) standing in for a Proxmox host's
kernel: deploys/host.py edits its real /etc/default/grub, runs update-grub, sysctls, swapoff
and modules-load.d, and reboots it (allow_reboot) to prove they survive a reboot.

kvm-vfio is the profile whose modules (vfio, vfio_iommu_type1, vfio_pci) a stock Debian
kernel has, so `lsmod` can show modules-load.d at work; there is no NVIDIA driver here.
"""

proxmox_hosts = [
    (
        "127.0.0.1",
        {
            "ssh_port": 2222,
            "ssh_user": "root",
            "ssh_key": ".sandbox/id_ed25519",
            "ssh_strict_host_key_checking": "no",
            "ssh_known_hosts_file": "/dev/null",
            "host_profile": "kvm-vfio",
            "boot_loader": "grub",
            "gpu_pci_ids": ["10de:2335"],
            "allow_reboot": True,
            # make test runs the VM at idle CPU priority beside other phases: a reboot may
            # take many minutes, and an ssh handshake may wait for CPU.
            "reboot_timeout_s": 1800,
            "ssh_connect_retries": 10,
            "ssh_connect_retry_min_delay": 5,
            "ssh_connect_retry_max_delay": 15,
            "lxc_guests": [],
            "kvm_guests": [],
        },
    )
]

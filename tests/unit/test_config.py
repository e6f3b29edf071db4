"""Config schema: the defaults validate, and every kind of mistake names the key."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import yaml

from rredcot.config import ConfigError, load_schema, validate_config


@pytest.fixture(scope="module")
def schema(repo):
    return load_schema(repo / "workflow" / "schemas" / "config.schema.yaml")


@pytest.fixture()
def default(repo):
    return yaml.safe_load((repo / "config.yaml").read_text())


@pytest.mark.parametrize("name", ["config.yaml", "configs/smoke.yaml"])
def test_shipped_configs_validate(repo, schema, name):
    config = yaml.safe_load((repo / name).read_text())
    validate_config(config, schema)


def test_defaults_are_filled(schema, default):
    del default["evaluation"]["top_p"]
    del default["seed"]
    validate_config(default, schema)
    assert default["evaluation"]["top_p"] == 0.95
    assert default["seed"] == 0


def test_unknown_key_is_named_with_allowed_keys(schema, default):
    default["evaluation"]["temprature"] = 0.5
    with pytest.raises(ConfigError) as err:
        validate_config(default, schema)
    msg = str(err.value)
    assert "temprature" in msg and "evaluation" in msg and "'temperature'" in msg


def test_wrong_type_names_the_key(schema, default):
    default["sft"]["max_steps"] = "many"
    with pytest.raises(ConfigError, match=r"sft\.max_steps"):
        validate_config(default, schema)


def test_out_of_range_names_the_key(schema, default):
    default["evaluation"]["temperature"] = -1
    with pytest.raises(ConfigError, match=r"evaluation\.temperature.*minimum"):
        validate_config(default, schema)


def test_bad_enum_lists_the_choices(schema, default):
    default["evaluation"]["backend"] = "tgi"
    with pytest.raises(ConfigError) as err:
        validate_config(default, schema)
    assert "evaluation.backend" in str(err.value) and "'hf'" in str(err.value)


def test_missing_required_key(schema, default):
    del default["world"]
    with pytest.raises(ConfigError, match="world"):
        validate_config(default, schema)


def test_every_error_is_reported_at_once(schema, default):
    bad = copy.deepcopy(default)
    bad["world"]["splits"]["synth_id"]["n"] = 0
    bad["resources"]["generate"]["gpus"] = 1
    with pytest.raises(ConfigError) as err:
        validate_config(bad, schema)
    msg = str(err.value)
    assert "2 error(s)" in msg
    assert "world.splits.synth_id.n" in msg and "gpus" in msg


def test_a_typo_in_the_mc_training_overrides_is_named(schema, default):
    """training.mc is closed: a misspelt key stops at load time, not inside train_policy."""
    default["training"]["mc"]["n_rolouts"] = 2
    with pytest.raises(ConfigError) as err:
        validate_config(default, schema)
    assert "n_rolouts" in str(err.value) and "training.mc" in str(err.value)


def test_a_variant_needs_a_known_method(schema, default):
    default["training"]["variants"] = [{"name": "x", "method": "ppo"}]
    with pytest.raises(ConfigError, match=r"training\.variants\.0\.method"):
        validate_config(default, schema)


# --- issue 12: every block closed, names and paths checked at load time --------------------

SHARED_TRAINING_KEYS = {  # one value for every run of a config: no per-method override
    *("methods", "seeds", "extra_seeds", "per_method", "variants", "baseline", "curve", "mc"),
    *("num_processes", "device", "bf16", "keep_stale_checkpoints", "save_minutes"),
    # how the launch waits and reports, not what a run computes
    *("ddp_timeout", "report_to", "report_offline", "allow_cpu"),
}  # `accelerate` may differ per method: it picks the launcher of that method's runs
METHOD_ONLY_KEYS = {
    "credit": {"rredcot", "mc", "oppo", "oracle_step", "oracle_rule"},
    "oppo": {"oppo"},
    "mc_batch_size": {"mc"},
    "resets": {"rrpo", "srpo"},
    "reference": {"rredcot"},  # which reference RREDCoT reads (own_path: the oracle variant)
    "rredcot": {"rredcot"},  # overrides of estimator.rredcot, not a training key
}


def test_per_method_keys_are_the_training_keys_that_apply(schema):
    """Each method's override list is exactly the training keys minus the shared ones, plus
    the keys of that method only; a new training key has to be sorted into one of them."""
    training = schema["properties"]["training"]["properties"]
    per_method = training["per_method"]["properties"]
    assert set(per_method) == set(training["methods"]["items"]["enum"])
    run_keys = set(training) - SHARED_TRAINING_KEYS - set(METHOD_ONLY_KEYS)
    assert "rredcot" not in training
    for method, sub in per_method.items():
        extra = {k for k, methods in METHOD_ONLY_KEYS.items() if method in methods}
        assert set(sub["propertyNames"]["enum"]) == run_keys | extra, method


def test_the_schema_lists_the_registrys_methods(repo, schema):
    """The method names in the schema (methods, variants, per_method) are the registry's, in
    its order, and a variant may not take a method's name or `base`."""
    from rredcot.training.method_registry import METHOD_SPECS, SHARED_RUN_KEYS
    from rredcot.training.methods import METHODS

    names = list(METHOD_SPECS)
    assert list(METHODS) == names
    assert all(METHODS[n].name == n for n in names)  # each class answers to its entry's name
    training = schema["properties"]["training"]["properties"]
    assert training["methods"]["items"]["enum"] == names
    variant = training["variants"]["items"]["properties"]
    assert variant["method"]["enum"] == names and variant["name"]["not"]["enum"] == ["base", *names]
    assert list(training["per_method"]["properties"]) == names
    shared = set(training) - SHARED_TRAINING_KEYS - set(METHOD_ONLY_KEYS)
    assert set(SHARED_RUN_KEYS) == shared
    # the YAML itself lists no method: one list, the registry's
    text = (repo / "workflow" / "schemas" / "config.schema.yaml").read_text()
    assert "enum: [grpo, rredcot" not in text and "\n          rredcot:\n" not in text


def test_the_schema_lists_the_segmentation_strategies_and_keys_of_the_code(repo, schema, default):
    """Strategies (the block's, the sweep's and its default: all) and the keys the studies may
    override are `rredcot.credit.segmentation`'s; the YAML lists none of them, so a new strategy or
    key is allowed everywhere at once, and a key the block lacks is refused."""
    import dataclasses

    from rredcot.credit.segmentation import STRATEGIES, SegmentationConfig

    strategies = list(STRATEGIES)
    keys = [f.name for f in dataclasses.fields(SegmentationConfig)]
    assert schema["properties"]["segmentation"]["properties"]["strategy"]["enum"] == strategies
    studies = schema["properties"]["studies"]["properties"]
    assert studies["segmentation"]["propertyNames"]["enum"] == keys
    sweep = studies["sweep"]["properties"]["strategies"]
    assert sweep["items"]["enum"] == strategies and sweep["default"] == strategies
    text = (repo / "workflow" / "schemas" / "config.schema.yaml").read_text()
    assert "low_prob_cutpoints, hybrid]" not in text and "merge_score, topq" not in text
    default["studies"]["sweep"]["strategies"] = ["keyword", "no_such_strategy"]
    with pytest.raises(ConfigError, match=r"studies\.sweep\.strategies"):
        validate_config(default, schema)


def test_a_variant_named_like_a_method_is_refused(schema, default):
    default["training"]["variants"] = [{"name": "oracle_step", "method": "grpo"}]
    with pytest.raises(ConfigError, match=r"training\.variants\.0\.name"):
        validate_config(default, schema)


def test_arch_keys_are_the_tiny_models_and_qwen3config_fields(schema):
    from transformers import Qwen3Config

    from rredcot.models.tiny import ALLOWED_ARCH_KEYS

    arch = schema["properties"]["model"]["properties"]["arch"]
    assert arch["additionalProperties"] is False
    assert set(arch["properties"]) == set(ALLOWED_ARCH_KEYS)
    fields = Qwen3Config().to_dict()
    fields.update(fields["rope_parameters"])  # rope_theta lives there (tiny_config puts it there)
    assert set(ALLOWED_ARCH_KEYS) <= set(fields)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"per_method": {"grpo": {"max_stepz": 3}}}, r"\['max_stepz'\] under training\.per_"),
        (
            {"per_method": {"grpo": {"resets": {}}}},
            r"\['resets'\] under training\.per_method\.grpo",
        ),
        ({"per_method": {"ppo": {}}}, r"\['ppo'\] under training\.per_method"),
        ({"per_method": {"mc": {"max_steps": 0}}}, r"'training\.per_method\.mc\.max_steps': 0"),
        (
            {"per_method": {"rredcot": {"credit": {"center": "mean"}}}},
            r"'training\.per_method\.rredcot\.credit\.center': 'mean' is not allowed",
        ),
        (
            {"variants": [{"name": "v", "method": "grpo", "credit": {"center": "group"}}]},
            r"\['credit'\] under training\.variants\.0",
        ),
        (
            {"variants": [{"name": "v", "method": "rredcot", "lr": 0.1}]},
            r"\['lr'\] under training\.variants\.0; allowed: \[.*'learning_rate'",
        ),
        (
            {"variants": [{"name": "v", "method": "rredcot", "rredcot": {"answer_now": "both"}}]},
            r"'training\.variants\.0\.rredcot\.answer_now': 'both' is not allowed",
        ),
        (
            {"variants": [{"name": "v", "method": "rredcot", "rredcot": {"valu": "x"}}]},
            r"\['valu'\] under training\.variants\.0\.rredcot",
        ),
        (
            {"variants": [{"name": "v", "method": "grpo", "rredcot": {"answer_now": "joint"}}]},
            r"\['rredcot'\] under training\.variants\.0",
        ),
    ],
)
def test_bad_per_method_or_variant_override_is_named(schema, default, change, expected):
    default["training"].update(change)
    with pytest.raises(ConfigError, match=expected):
        validate_config(default, schema)


def test_overrides_get_no_defaults_filled_in(schema, default):
    """An override holds only what the config says; a filled-in default would override the
    shared setting (here credit.mode) for that method."""
    default["training"]["credit"]["mode"] = "mixed"
    default["training"]["per_method"] = {"rredcot": {"credit": {"center": "group"}}}
    variants = [
        {"name": "rredcot_center_group", "method": "rredcot", "credit": {"center": "group"}},
        {"name": "rredcot_conditional", "method": "rredcot",
         "rredcot": {"answer_now": "conditional"}},
    ]  # fmt: skip
    default["training"]["variants"] = copy.deepcopy(variants)
    validate_config(default, schema)
    assert default["training"]["per_method"] == {"rredcot": {"credit": {"center": "group"}}}
    assert default["training"]["variants"] == variants


def test_unknown_benchmark_and_per_benchmark_names_list_the_allowed(schema, default):
    default["benchmarks"] = ["synth_id", "aime2099"]
    default["evaluation"]["per_benchmark"]["synth_idd"] = {"top_p": 1.0}
    default["evaluation"]["per_benchmark"]["numina_cot"] = {"top_p": 1.0}  # a problem set
    with pytest.raises(ConfigError) as err:
        validate_config(default, schema)
    msg = str(err.value)
    assert "2 error(s)" in msg
    assert "config key 'benchmarks': 'aime2099'" in msg and "'synth_ood'" in msg
    assert "'evaluation.per_benchmark': 'synth_idd'" in msg and "'aime24'" in msg


def test_mirror_error_names_the_key_or_the_variable(monkeypatch, tmp_path):
    from rredcot.config import mirror_error

    monkeypatch.delenv("RREDCOT_MIRROR", raising=False)
    assert mirror_error(None) is None  # no mirror: the Hub
    assert mirror_error(str(tmp_path)) is None
    assert "config key 'data.mirror'" in mirror_error(str(tmp_path / "gone"))
    monkeypatch.setenv("RREDCOT_MIRROR", str(tmp_path / "gone"))
    msg = mirror_error(str(tmp_path))  # the variable wins over the key
    assert msg is not None and msg.startswith("environment variable RREDCOT_MIRROR")


def test_model_path_error_only_for_local_paths_without_a_checkpoint(tmp_path):
    from rredcot.config import model_path_error

    assert model_path_error(None) is None
    assert model_path_error("Qwen/Qwen3-4B") is None  # a Hub id: checked when fetched
    assert "does not exist" in model_path_error(str(tmp_path / "gone"))
    assert "holds no config.json" in model_path_error(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert model_path_error(str(tmp_path)) is None


# --- issue 21: values a job used to be the first to reject -------------------------------------

LATE_VALUES = [  # (overlay on the smoke config, texts the load-time error must name)
    ("seed: -1", ["config key 'seed'", "minimum of 0"]),
    ("seed: 4294967296", ["config key 'seed'", "maximum of 4294967295"]),
    ("training: {seeds: [-1]}", ["config key 'training.seeds.0'", "minimum of 0"]),
    ("training: {seeds: [0, 0]}", ["config key 'training.seeds'", "non-unique"]),
    ("training: {methods: [grpo, grpo]}", ["config key 'training.methods'", "non-unique"]),
    ("training: {methods: []}", ["config key 'training.methods'", "should be non-empty"]),
    ("studies: {accuracy_band: [0.7, 0.3]}", ["config key 'studies.accuracy_band'", "low <= high"]),
    ("studies: {segmentation: {stratgy: keyword}}", ["studies.segmentation", "'strategy'"]),
    ("studies: {segmentation: {topq: 2}}", ["config key 'studies.segmentation.topq'"]),
    (
        "studies: {segmentation: {strategy: fixed, num_segments: null}}",
        ["config key 'studies.segmentation'", "fixed"],
    ),
    ("segmentation: {strategy: hybrid, num_segments: null}", ["config key 'segmentation'"]),
    ("studies: {mc_n: [2, 2]}", ["config key 'studies.mc_n'", "non-unique"]),
    (  # the frontier's forms and transforms are checked like the blocks they override
        "studies: {frontier: {rredcot_variants: {x: {sufixes: 1}}}}",
        ["studies.frontier.rredcot_variants.x", "'sufixes'"],
    ),
    (
        "studies: {frontier: {rredcot_variants: {x: {suffixes: 1, value: ref_path_ratio}}}}",
        ["config key 'studies.frontier.rredcot_variants.x'", "ref_suffix_sum only"],
    ),
    (
        "studies: {frontier: {transforms: {t: {mode: nope}}}}",
        ["config key 'studies.frontier.transforms.t.mode'", "'immediate'"],
    ),
    ("world: {ops: ['+', '+']}", ["config key 'world.ops'", "non-unique"]),
    ("world: {seed: -3}", ["config key 'world.seed'"]),
    ("world: {modulus: 2, n_given: 3}", ["config key 'world'", "bijective"]),
    ("world: {splits: {synth_ood: {n: 8, depths: [30]}}}", ["'world.splits.synth_ood.depths'"]),
    ("studies: {pool: {n: 4, depths: [40]}}", ["config key 'studies.pool.depths'", "exceeds"]),
    (
        "world: {shape: tree, splits: {synth_ood: {n: 8, depths: [5], branches: 4}}}",
        ["config key 'world.splits.synth_ood.branches'", "does not fit depth(s) [5]"],
    ),
    (
        "world: {shape: chain, splits: {synth_ood: {n: 8, depths: [5], branches: 1}}}",
        ["config key 'world.splits.synth_ood.branches'", "needs world.shape 'tree'"],
    ),
    ("sft: {heldout_problems: 400}", ["config key 'sft.heldout_problems'", "no training rows"]),
    ("sft: {anneal_steps: 200}", ["config key 'sft.anneal_steps'", "max_steps"]),
    ("sft: {anneal_steps: 50, heldout_problems: 0}", ["config key 'sft.anneal_steps'", "held-out"]),
    ("sft: {warmup_ratio: 1.0}", ["config key 'sft.warmup_ratio'"]),
    ("model: {arch: {num_key_value_heads: 3}}", ["'model.arch.num_key_value_heads'", "divide"]),
    (
        "estimator: {rredcot: {suffixes: 4, value: ref_suffix_max}}",
        ["config key 'estimator.rredcot.value'", "'ref_suffix_sum' was expected"],
    ),
    # issue 32: settings a component would ignore
    (
        "training: {lr_scheduler: constant, warmup_ratio: 0.1}",
        ["config key 'training.warmup_ratio'", "training.lr_scheduler 'constant' has none"],
    ),
    (  # the smoke config generates with hf: the typo is caught all the same
        "evaluation: {vllm: {max_modle_len: 4096}}",
        ["config key 'evaluation.vllm'", "'max_modle_len' (did you mean 'max_model_len'?)"],
    ),
]


@pytest.mark.parametrize(("line", "named"), LATE_VALUES, ids=[line for line, _ in LATE_VALUES])
def test_values_a_job_rejected_are_rejected_at_load_time(repo, schema, line, named):
    from snakemake.utils import update_config

    config = yaml.safe_load((repo / "configs" / "smoke.yaml").read_text())
    update_config(config, yaml.safe_load(line))
    with pytest.raises(ConfigError) as err:
        validate_config(config, schema)
    for text in named:
        assert text in str(err.value), (text, str(err.value))


def test_the_joint_checks_leave_a_pretrained_model_s_sft_and_arch_alone(repo, schema):
    """SFT and the tiny model's sizes only matter when the tiny model is built here."""
    config = yaml.safe_load((repo / "configs" / "smoke.yaml").read_text())
    config["model"]["name_or_path"] = "owner/model"
    config["model"]["arch"]["num_key_value_heads"] = 3
    config["sft"]["heldout_problems"] = 1000
    validate_config(config, schema)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([{"run": "nope", "seeds": [4]}], "'nope' is not a run"),
        ([{"run": "grpo", "seeds": [1, 4]}], r"\[1\] are already in training.seeds"),
        ([{"run": "rredcot", "seeds": [4]}], "rredcot seeds \\[4\\] have no grpo run"),
        ([{"run": "grpo", "seeds": [4]}, {"run": "grpo", "seeds": [5]}], "listed twice"),
    ],
)
def test_extra_seeds_are_checked_naming_the_key(default, schema, extra, message) -> None:
    default["training"]["seeds"] = [1, 2, 3]
    default["training"]["extra_seeds"] = extra
    with pytest.raises(ConfigError, match=message):
        validate_config(default, schema)


def test_a_warm_up_with_a_schedule_that_has_one_is_accepted(repo, schema):
    config = yaml.safe_load((repo / "configs" / "smoke.yaml").read_text())
    config["training"].update(lr_scheduler="cosine", warmup_ratio=0.1)
    config["evaluation"]["vllm"] = {"max_model_len": 4096, "enforce_eager": True}
    validate_config(config, schema)


def test_the_slurm_profile_resubmits_and_signals_training_early(repo):
    """Issue 28 item 4 / issue 32: at least 3 retries, each resuming; SIGTERM 15 minutes before
    the time limit and a checkpoint every 30 minutes for training (rule train_policy reads the
    save_minutes resource)."""
    profile = yaml.safe_load((repo / "workflow/profiles/slurm/profile.yaml").read_text())
    assert profile["retries"] >= 3
    train = profile["set-resources"]["train_policy"]
    assert train["slurm_extra"] == "'--signal=TERM@900'" and train["save_minutes"] == 30
    rule = (repo / "workflow/rules/training.smk").read_text()
    assert "--save-minutes {resources.save_minutes}" in rule
    # exec: no shell between the signal and the device wrapper, which exec's the trainer
    assert '"exec {params.gpu_job} --gpus {resources.gpu} -- {params.launcher}' in rule


LIGHT_CHECK = """
import sys

import yaml
from snakemake.utils import update_config

from rredcot.planning import memory_plan, vllm_memory
from rredcot.config import validate_config
from rredcot.workflow.run_params import run_settings

config = yaml.safe_load(open("config.yaml"))
update_config(config, yaml.safe_load(open(sys.argv[1])))
validate_config(config)
seed = config["training"]["seeds"][0]
runs = {m: run_settings(config, m, seed, task="math") for m in config["training"]["methods"]}
vllm_memory.config_errors(config, runs, None)
memory_plan.config_errors(config, runs, None)
print(sorted({"torch", "transformers", "polars"} & set(sys.modules)))
"""
"""What the Snakefile runs on every invocation: the config check, then the runs' memory
planners, on a config overlay merged over config.yaml; prints the heavy packages imported."""


@pytest.mark.parametrize(
    "overlay", ["configs/smoke.yaml", "configs/full.yaml", "configs/paper_qwen3_4b.yaml"]
)
def test_the_config_check_imports_no_torch_transformers_or_polars(repo, overlay):
    """Every `snakemake` call, a dry run included, runs the config check: torch and
    transformers would add seconds to each, polars a quarter of a second (a fresh interpreter,
    so nothing is imported yet). The paper config's GPU runs take the memory planner through
    the credit's chunk plan."""
    src = str(repo / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", LIGHT_CHECK, overlay],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout

"""Every flag of the original's scripts is accepted, and the ones with a meaning here have it:
epochs and warmup proportion as steps, TF-Hub module folders, RACE defaults by model version,
the exported classifier's threshold, the feature-file flags as cache directories."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import synthetic_glue as synthetic
import tensorflow as tf
from absl import flags

from albert.export import export_classifier
from albert.modeling import AlbertClassifier
from albert.tasks import classification, hyperparameters, race, squad
from albert.tasks import flags as finetuning_flags
from albert.training import flags as training_flags
from albert.training.flags import FlagError
from tests.helpers import tiny_config

# Every flag each original script defines (google-research/albert, final versions).
_TPU = ["use_tpu", "tpu_name", "tpu_zone", "gcp_project", "master", "num_tpu_cores"]
_SQUAD = [
    "albert_config_file",
    "vocab_file",
    "spm_model_file",
    "output_dir",
    "train_file",
    "predict_file",
    "train_feature_file",
    "predict_feature_file",
    "predict_feature_left_file",
    "init_checkpoint",
    "albert_hub_module_handle",
    "do_lower_case",
    "max_seq_length",
    "doc_stride",
    "max_query_length",
    "do_train",
    "do_predict",
    "train_batch_size",
    "predict_batch_size",
    "learning_rate",
    "num_train_epochs",
    "warmup_proportion",
    "save_checkpoints_steps",
    "iterations_per_loop",
    "n_best_size",
    "max_answer_length",
    *_TPU,
]
ORIGINAL_FLAGS = {
    "run_squad_v1": [*_SQUAD, "use_einsum", "export_dir"],
    "run_squad_v2": [*_SQUAD, "start_n_top", "end_n_top", "dropout_prob"],
    "run_race": [
        "data_dir",
        "albert_config_file",
        "task_name",
        "vocab_file",
        "train_file",
        "eval_file",
        "predict_file",
        "spm_model_file",
        "output_dir",
        "init_checkpoint",
        "albert_hub_module_handle",
        "do_lower_case",
        "dropout_prob",
        "max_seq_length",
        "max_qa_length",
        "num_keep_checkpoint",
        "high_only",
        "middle_only",
        "do_train",
        "do_eval",
        "do_predict",
        "train_batch_size",
        "eval_batch_size",
        "predict_batch_size",
        "learning_rate",
        "train_step",
        "warmup_step",
        "save_checkpoints_steps",
        "iterations_per_loop",
        *_TPU,
    ],
    "run_classifier": [
        "data_dir",
        "albert_config_file",
        "task_name",
        "vocab_file",
        "spm_model_file",
        "output_dir",
        "cached_dir",
        "init_checkpoint",
        "albert_hub_module_handle",
        "do_lower_case",
        "max_seq_length",
        "do_train",
        "do_eval",
        "do_predict",
        "train_batch_size",
        "eval_batch_size",
        "predict_batch_size",
        "learning_rate",
        "train_step",
        "warmup_step",
        "save_checkpoints_steps",
        "keep_checkpoint_max",
        "iterations_per_loop",
        "optimizer",
        "export_dir",
        "threshold_to_export",
        *_TPU,
    ],
    "run_pretraining": [
        "albert_config_file",
        "input_file",
        "output_dir",
        "init_checkpoint",
        "max_seq_length",
        "max_predictions_per_seq",
        "do_train",
        "do_eval",
        "train_batch_size",
        "eval_batch_size",
        "optimizer",
        "learning_rate",
        "poly_power",
        "num_train_steps",
        "num_warmup_steps",
        "start_warmup_step",
        "save_checkpoints_steps",
        "keep_checkpoint_max",
        "iterations_per_loop",
        "max_eval_steps",
        "init_from_group0",
        "masked_lm_budget",
        *_TPU,
    ],
}
DEFINERS = {
    "run_squad_v1": squad.define_squad_flags,
    "run_squad_v2": squad.define_squad_flags,
    "run_race": race.define_race_flags,
    "run_classifier": classification.define_classifier_flags,
    "run_pretraining": training_flags.define_pretraining_flags,
}


def flag_values_of(script, *args):
    flag_values = flags.FlagValues()
    DEFINERS[script](flag_values)
    flag_values([f"{script}.py", *args])
    return flag_values


@pytest.mark.parametrize("script", sorted(ORIGINAL_FLAGS))
def test_every_original_flag_is_defined(script):
    flag_values = flag_values_of(script)
    missing = [name for name in ORIGINAL_FLAGS[script] if name not in flag_values]
    assert not missing, missing


def test_epochs_and_warmup_proportion_become_steps_as_the_original():
    flag_values = flag_values_of(
        "run_squad_v2", "--train_batch_size=16", "--num_train_epochs=2.5", "--warmup_proportion=.3"
    )
    hyperparameters.steps_from_epochs(flag_values, "squad2.0", lambda: 37)
    assert flag_values.num_train_steps == int(37 / 16 * 2.5) == 5
    assert flag_values.num_warmup_steps == int(5 * 0.3) == 1
    # The batch size from the paper's table (48) when the command line gives none.
    flag_values = flag_values_of("run_squad_v1", "--num_train_epochs=2")
    hyperparameters.steps_from_epochs(flag_values, "squad1.1", lambda: 1000)
    assert flag_values.num_train_steps == int(1000 / 48 * 2) == 41
    # Epochs alone warm up for the original's default proportion, not the table's 365 steps.
    assert flag_values.num_warmup_steps == int(41 * 0.1) == 4
    flag_values = flag_values_of("run_squad_v2", "--num_train_epochs=2", "--warmup_step=7")
    hyperparameters.steps_from_epochs(flag_values, "squad2.0", lambda: 1000)
    assert flag_values.num_warmup_steps == 7
    # Neither epochs nor a proportion: the table fills both counts later.
    flag_values = flag_values_of("run_squad_v2")
    hyperparameters.steps_from_epochs(flag_values, "squad2.0", lambda: 1000)
    assert (flag_values.num_train_steps, flag_values.num_warmup_steps) == (None, None)
    with pytest.raises(FlagError, match="--num_train_epochs or --num_train_steps"):
        hyperparameters.steps_from_epochs(
            flag_values_of("run_squad_v1", "--num_train_epochs=2", "--train_step=9"),
            "squad1.1",
            lambda: 10,
        )
    with pytest.raises(FlagError, match="--num_train_epochs must be positive and finite"):
        hyperparameters.steps_from_epochs(
            flag_values_of("run_squad_v1", "--num_train_epochs=inf"), "squad1.1", lambda: 10
        )
    with pytest.raises(FlagError, match="--warmup_proportion must be in"):
        hyperparameters.steps_from_epochs(
            flag_values_of("run_squad_v1", "--warmup_proportion=1.5"), "squad1.1", lambda: 10
        )
    # A set smaller than a batch still trains a step; a proportion of 0 is no warmup.
    flag_values = flag_values_of("run_squad_v1", "--num_train_epochs=1", "--warmup_proportion=0")
    hyperparameters.steps_from_epochs(flag_values, "squad1.1", lambda: 10)
    assert (flag_values.num_train_steps, flag_values.num_warmup_steps) == (1, 0)


def test_the_tasks_checks_see_the_flags_the_table_filled():
    # run_race checks --max_qa_length against the --max_seq_length the table may fill.
    class Checked(Exception):
        pass

    def check(flag_values):
        assert flag_values.max_seq_length == 512  # the paper's row for mrpc
        raise Checked

    flag_values = flag_values_of(
        "run_classifier", "--output_dir=out", "--do_train", "--spm_model_file=missing.model"
    )
    with pytest.raises(Checked):
        finetuning_flags.setup_from_flags(flag_values, lambda flag_values: "mrpc", check)


def test_aliases_of_the_original_names():
    flag_values = flag_values_of("run_race", "--dropout_prob=0.25", "--num_keep_checkpoint=2")
    assert flag_values.classifier_dropout_prob == 0.25 and flag_values.keep_checkpoint_max == 2
    assert flag_values_of("run_squad_v2", "--dropout_prob=0.3").classifier_dropout_prob == 0.3


@pytest.mark.parametrize(
    "path, version",
    [
        ("models/albert_base_v2/albert_config.json", "v2"),
        ("albert_xxlarge_v2", "v2"),
        ("gs://bucket/ALBERT_LARGE_V2/albert_config.json", "v2"),  # a path's case is kept
        ("models/albert_base/albert_config.json", "v1"),
        ("models/v20/config.json", "v1"),
    ],
)
def test_race_defaults_follow_the_model_version(path, version):
    flag_values = flag_values_of("run_race", f"--albert_config_file={path}")
    assert race.model_version(flag_values) == version
    hyperparameters.fill_from_table(flag_values, f"race_{version}")
    expected = (1e-5, 0.0) if version == "v2" else (2e-5, 0.1)
    assert (flag_values.learning_rate, flag_values.albert_dropout_prob) == expected
    explicit = flag_values_of("run_race", f"--albert_config_file={path}", "--model_version=v1")
    assert race.model_version(explicit) == "v1"


def _hub_module(directory):
    variables = Path(directory) / "variables"
    variables.mkdir(parents=True)
    tf.raw_ops.SaveV2(
        prefix=str(variables / "variables"),
        tensor_names=["module/x"],
        shape_and_slices=[""],
        tensors=[np.zeros(2, "float32")],
    )
    (Path(directory) / "assets").mkdir()
    shutil.copy(synthetic.SPM_MODEL, Path(directory) / "assets" / "30k-clean.model")
    return str(directory)


def test_hub_module_folder_and_url(tmp_path):
    module = _hub_module(tmp_path / "albert_base_3")
    flag_values = flag_values_of(
        "run_classifier",
        f"--albert_hub_module_handle={module}",
        f"--output_dir={tmp_path}",
        "--do_train",
    )
    finetuning_flags.check_finetuning_flags(flag_values)
    assert flag_values.init_checkpoint == f"{module}/variables/variables"
    assert flag_values.spm_model_file == f"{module}/assets/30k-clean.model"
    assert flag_values.albert_config_file is None  # the module holds none
    (Path(module) / "assets" / "albert_config.json").write_text("{}")
    finetuning_flags.apply_hub_module(flag_values_of("run_race", f"--output_dir={tmp_path}"))
    with_config = flag_values_of("run_race", f"--albert_hub_module_handle={module}")
    finetuning_flags.apply_hub_module(with_config)
    assert with_config.albert_config_file == f"{module}/assets/albert_config.json"
    for handle, message in (
        ("https://tfhub.dev/google/albert_base/3", "is a URL, which is not fetched"),
        (str(tmp_path), "is not a TF-Hub module directory"),
    ):
        with pytest.raises(FlagError, match=message):
            finetuning_flags.apply_hub_module(
                flag_values_of("run_squad_v1", f"--albert_hub_module_handle={handle}")
            )
    with pytest.raises(FlagError, match="not both"):
        finetuning_flags.apply_hub_module(
            flag_values_of(
                "run_squad_v1", f"--albert_hub_module_handle={module}", "--init_checkpoint=x"
            )
        )


def test_flags_given_with_a_hub_module_win_over_its_files(tmp_path):
    module = _hub_module(tmp_path / "albert_base_3")
    (Path(module) / "assets" / "albert_config.json").write_text("{}")
    flag_values = flag_values_of(
        "run_classifier",
        f"--albert_hub_module_handle={module}",
        "--vocab_file=vocab.txt",  # a WordPiece model: no SentencePiece model to take
        "--albert_config_file=my_config.json",
    )
    finetuning_flags.apply_hub_module(flag_values)
    assert flag_values.init_checkpoint == f"{module}/variables/variables"
    assert flag_values.spm_model_file is None
    assert flag_values.albert_config_file == "my_config.json"


def test_the_config_takes_the_dropout_flag_and_fits_the_sequence_length(tmp_path):
    # --albert_dropout_prob=0 (most rows of the paper's table) turns a v1 config's 0.1 off.
    path = synthetic.write_config(
        tmp_path / "albert_config.json", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1
    )
    max_positions = synthetic.TINY_CONFIG["max_position_embeddings"]
    flag_values = flag_values_of(
        "run_classifier",
        f"--albert_config_file={path}",
        "--albert_dropout_prob=0",
        f"--max_seq_length={max_positions}",  # every position embedding used: fits
    )
    config = finetuning_flags.config_from_flags(flag_values)
    assert config.hidden_dropout_prob == 0.0 and config.attention_probs_dropout_prob == 0.0
    flag_values.max_seq_length = max_positions + 1
    with pytest.raises(
        FlagError, match=f"exceeds the config's max_position_embeddings={max_positions}"
    ):
        finetuning_flags.config_from_flags(flag_values)


def test_feature_file_flags_select_the_cache_directory(tmp_path):
    flag_values = flag_values_of(
        "run_squad_v1",
        f"--train_feature_file={tmp_path / 'a' / 'train.tfrecord'}",
        f"--predict_feature_left_file={tmp_path / 'b' / 'left.pkl'}",
    )
    assert finetuning_flags.feature_file_directory(flag_values, ("train_feature_file",)) == str(
        tmp_path / "a"
    )
    predict = ("predict_feature_file", "predict_feature_left_file")
    assert finetuning_flags.feature_file_directory(flag_values, predict) == str(tmp_path / "b")
    assert finetuning_flags.feature_file_directory(flag_values, ("predict_feature_file",)) is None
    bare = flag_values_of("run_race", "--train_file=train.tf_record", "--cached_dir=c")
    assert finetuning_flags.feature_file_directory(bare, ("train_file",)) == "c"


@pytest.mark.slow
def test_threshold_to_export_is_served_with_the_predictions(tmp_path):
    config = tiny_config(
        vocab_size=1000,
        intermediate_size=22,
        num_hidden_layers=1,
        num_hidden_groups=1,
        inner_group_num=1,
        max_position_embeddings=20,
        type_vocab_size=2,
    )
    model = AlbertClassifier(config, 2)
    export_classifier(
        model,
        synthetic.SPM_MODEL,
        True,
        12,
        ("0", "1"),
        str(tmp_path / "with"),
        sentence_pair=False,
        threshold=0.625,
    )
    export_classifier(
        model,
        synthetic.SPM_MODEL,
        True,
        12,
        ("0", "1"),
        str(tmp_path / "none"),
        sentence_pair=False,
    )
    serve = tf.saved_model.load(str(tmp_path / "with")).signatures["serving_default"]
    outputs = serve(sentence_a=tf.constant(["a film", "gold"]))
    assert outputs["probabilities"].shape == (2, 2)
    # One per row: TF Serving's REST row format needs every output to share the batch size.
    assert outputs["threshold"].dtype == tf.float32
    assert outputs["threshold"].numpy().tolist() == [0.625, 0.625]
    signature = serve.structured_outputs["threshold"]
    assert signature.shape.as_list() == [None]
    plain = tf.saved_model.load(str(tmp_path / "none")).signatures["serving_default"]
    assert "threshold" not in plain.structured_outputs
    assert np.isnan(flag_values_of("run_classifier").threshold_to_export)


def test_export_dir_alone_is_something_to_do(tmp_path):
    # The original run_squad_v1 exports with neither --do_train nor --do_predict.
    flag_values = flag_values_of(
        "run_squad_v1",
        f"--output_dir={tmp_path / 'out'}",
        f"--export_dir={tmp_path / 'export'}",
        f"--spm_model_file={synthetic.SPM_MODEL}",
    )
    finetuning_flags.check_finetuning_flags(flag_values)
    hyperparameters.fill_from_table(flag_values, "squad1.1")
    options = training_flags.run_options_from_flags(flag_values)
    assert not (options.do_train or options.do_eval)
    with pytest.raises(FlagError, match="there is nothing to do"):
        finetuning_flags.check_finetuning_flags(
            flag_values_of("run_squad_v1", f"--output_dir={tmp_path}")
        )


@pytest.mark.parametrize(
    "script, steps",
    [("run_classifier", 1000), ("run_squad_v1", 1000), ("run_squad_v2", 1000), ("run_race", 100)],
)
def test_checkpoint_cadence_is_the_original_scripts(script, steps):
    # Each original script's --save_checkpoints_steps default (run_race.py's is 100).
    assert flag_values_of(script).save_checkpoints_steps == steps


@pytest.mark.parametrize(
    "args, kept",
    [
        (["--do_train", "--nodo_eval"], 0),  # run_glue.sh's first command: every checkpoint
        (["--do_train", "--nodo_eval", "--keep_checkpoint_max=3"], 3),
        (["--do_train", "--do_eval"], 5),  # the best is kept as model.ckpt-best meanwhile
    ],
)
def test_training_without_eval_keeps_every_checkpoint_as_the_original(tmp_path, args, kept):
    # The original fine-tuning scripts keep every checkpoint (RunConfig(keep_checkpoint_max=0))
    # for the later --do_eval run to choose among; the newest 5 only left the others out.
    flag_values = flag_values_of(
        "run_classifier",
        "--task_name=sst-2",
        f"--data_dir={tmp_path}",
        f"--output_dir={tmp_path}",
        f"--spm_model_file={synthetic.SPM_MODEL}",
        f"--albert_config_file={synthetic.write_config(tmp_path / 'config.json')}",
        "--max_seq_length=32",
        *args,
    )
    setup = finetuning_flags.setup_from_flags(flag_values, classification.glue_task_key)
    assert setup.options.keep_checkpoint_max == kept


# The type and default of every original flag (google-research/albert, final versions).
_TPU_DEFAULTS = {
    "use_tpu": False,
    "tpu_name": None,
    "tpu_zone": None,
    "gcp_project": None,
    "master": None,
    "num_tpu_cores": 8,
}
_SQUAD_DEFAULTS = {
    **dict.fromkeys(_SQUAD[:11]),  # the paths and the hub handle
    "do_lower_case": True,
    "max_seq_length": 384,
    "doc_stride": 128,
    "max_query_length": 64,
    "do_train": False,
    "do_predict": False,
    "train_batch_size": 32,
    "predict_batch_size": 8,
    "learning_rate": 5e-5,
    "num_train_epochs": 3.0,
    "warmup_proportion": 0.1,
    "save_checkpoints_steps": 1000,
    "iterations_per_loop": 1000,
    "n_best_size": 20,
    "max_answer_length": 30,
    **_TPU_DEFAULTS,
}
ORIGINAL_DEFAULTS = {
    "run_squad_v1": {**_SQUAD_DEFAULTS, "use_einsum": True, "export_dir": None},
    "run_squad_v2": {**_SQUAD_DEFAULTS, "start_n_top": 5, "end_n_top": 5, "dropout_prob": 0.1},
    "run_race": {
        **dict.fromkeys(["data_dir", "albert_config_file", "vocab_file", "train_file"]),
        **dict.fromkeys(["eval_file", "predict_file", "spm_model_file", "output_dir"]),
        **dict.fromkeys(["init_checkpoint", "albert_hub_module_handle"]),
        "task_name": "race",
        "do_lower_case": True,
        "dropout_prob": 0.1,
        "max_seq_length": 512,
        "max_qa_length": 128,
        "num_keep_checkpoint": 5,
        "high_only": False,
        "middle_only": False,
        "do_train": True,
        "do_eval": True,
        "do_predict": False,
        "train_batch_size": 32,
        "eval_batch_size": 8,
        "predict_batch_size": 8,
        "learning_rate": 1e-5,
        "train_step": 12000,
        "warmup_step": 1000,
        "save_checkpoints_steps": 100,
        "iterations_per_loop": 1000,
        **_TPU_DEFAULTS,
    },
    "run_classifier": {
        **dict.fromkeys(["data_dir", "albert_config_file", "task_name", "vocab_file"]),
        **dict.fromkeys(["spm_model_file", "output_dir", "cached_dir", "init_checkpoint"]),
        **dict.fromkeys(["albert_hub_module_handle", "export_dir"]),
        "do_lower_case": True,
        "max_seq_length": 512,
        "do_train": False,
        "do_eval": False,
        "do_predict": False,
        "train_batch_size": 32,
        "eval_batch_size": 8,
        "predict_batch_size": 8,
        "learning_rate": 5e-5,
        "train_step": 1000,
        "warmup_step": 0,
        "save_checkpoints_steps": 1000,
        "keep_checkpoint_max": 5,
        "iterations_per_loop": 1000,
        "optimizer": "adamw",
        "threshold_to_export": float("nan"),
        **_TPU_DEFAULTS,
    },
    "run_pretraining": {
        **dict.fromkeys(["albert_config_file", "input_file", "output_dir", "init_checkpoint"]),
        "max_seq_length": 512,
        "max_predictions_per_seq": 20,
        "do_train": True,
        "do_eval": False,
        "train_batch_size": 4096,
        "eval_batch_size": 64,
        "optimizer": "lamb",
        "learning_rate": 0.00176,
        "poly_power": 1.0,
        "num_train_steps": 125000,
        "num_warmup_steps": 3125,
        "start_warmup_step": 0,
        "save_checkpoints_steps": 5000,
        "keep_checkpoint_max": 5,
        "iterations_per_loop": 1000,
        "max_eval_steps": 100,
        "init_from_group0": False,
        "masked_lm_budget": 0.0,
        **_TPU_DEFAULTS,
    },
}
# Where a default differs on purpose (README, "Compatibility with the original"), and the
# words of the flag's help that say so.
DOCUMENTED_DEFAULTS = {
    **dict.fromkeys(
        [
            "max_seq_length",
            "train_batch_size",
            "learning_rate",
            "train_step",
            "warmup_step",
            "num_train_epochs",
            "warmup_proportion",
        ],
        "the paper's",
    ),
    "do_train": "must be passed",
    "do_eval": "must be passed",
}


def _type_and_default(flag):
    # An absl flag's parser names its type: BooleanParser, IntegerParser, FloatParser,
    # EnumParser (a string of the listed values) or ArgumentParser (a string).
    kind = type(flag.parser).__name__
    kind = {"BooleanParser": bool, "IntegerParser": int, "FloatParser": float}.get(kind, str)
    return kind, flag.default


def _assert_same_type_and_default(script, flag_values, expected):
    for name, default in expected.items():
        # An alias (--train_step) reads the flag it names; that flag's help is the one shown.
        flag = flag_values[finetuning_flags.ORIGINAL_ALIASES.get(name, name)]
        kind, ours = _type_and_default(flag)
        if default is not None:
            assert kind is type(default), (script, name, kind)
        if ours == default or (ours != ours and default != default):  # NaN: the same
            continue
        note = DOCUMENTED_DEFAULTS.get(name)
        assert note and note in flag.help, (script, name, ours, default, flag.help)


@pytest.mark.parametrize("script", sorted(ORIGINAL_DEFAULTS))
def test_original_flags_keep_their_type_and_default(script):
    # Same type and default as the original, or a difference its help (and the README) gives.
    _assert_same_type_and_default(script, flag_values_of(script), ORIGINAL_DEFAULTS[script])


def test_create_pretraining_data_flags_are_the_originals():
    expected = {
        **dict.fromkeys(["input_file", "output_file", "vocab_file", "spm_model_file"]),
        "input_file_mode": "r",
        "do_lower_case": True,
        "do_whole_word_mask": True,
        "do_permutation": False,
        "favor_shorter_ngram": True,
        "random_next_sentence": False,
        "max_seq_length": 512,
        "ngram": 3,
        "max_predictions_per_seq": 20,
        "random_seed": 12345,
        "dupe_factor": 40,
        "masked_lm_prob": 0.15,
        "short_seq_prob": 0.1,
        "parallel": False,
    }
    # The script declares its flags in absl's global FlagValues: read them in a fresh process.
    code = (
        "import json, albert.create_pretraining_data\n"
        "from absl import flags\n"
        "f = flags.FLAGS\n"
        f"print(json.dumps({{n: [type(f[n].parser).__name__, f[n].default] for n in {list(expected)}}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    kinds = {"BooleanParser": bool, "IntegerParser": int, "FloatParser": float}
    for name, (parser, default) in json.loads(out.splitlines()[-1]).items():
        assert default == expected[name], name
        if expected[name] is not None:
            assert kinds.get(parser, str) is type(expected[name]), name

"""Helpers for the checkpoint tests: random weights, TF1 files, the HF fixture's inputs.

The TF1 names here are written out from the original's variable scopes, in modeling.py
(AlbertModel, embedding_lookup, embedding_postprocessor, transformer_model) and
run_pretraining.py (get_masked_lm_output, get_sentence_order_output), independently of
`albert.checkpoints.tf1`, so the tests check the table against the facts.
"""

import os
import pathlib

import numpy as np

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
# The committed HF AlbertForPreTraining directory with random weights (G=2, inner=2).
HF_FIXTURE = str(FIXTURES / "hf_grouped")


def copy_up(local, remote):
    """Copies the files of the local folder `local` into the remote folder `remote` (ram://,
    standing in for gs://); returns `remote`."""
    import tensorflow as tf

    tf.io.gfile.makedirs(remote)
    for name in os.listdir(local):
        tf.io.gfile.copy(os.path.join(local, name), f"{remote}/{name}", overwrite=True)
    return remote


def randomize(model, seed=0):
    """Gives every weight a distinct random value (LayerNorm and biases too)."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    return model


def reference_tf1_shapes(config, heads=True):
    """Original TF1 name -> shape for `config`, as listed in the reference."""
    V, E, H = config.vocab_size, config.embedding_size, config.hidden_size
    P, T = config.max_position_embeddings, config.type_vocab_size
    F = config.intermediate_size  # I in the reference
    shapes = {
        "bert/embeddings/word_embeddings": (V, E),
        "bert/embeddings/token_type_embeddings": (T, E),
        "bert/embeddings/position_embeddings": (P, E),
        "bert/embeddings/LayerNorm/gamma": (E,),
        "bert/embeddings/LayerNorm/beta": (E,),
        "bert/pooler/dense/kernel": (H, H),
        "bert/pooler/dense/bias": (H,),
    }
    if E != H:  # the original creates the projection only then
        shapes["bert/encoder/embedding_hidden_mapping_in/kernel"] = (E, H)
        shapes["bert/encoder/embedding_hidden_mapping_in/bias"] = (H,)
    for g in range(config.num_hidden_groups):
        for i in range(config.inner_group_num):
            block = f"bert/encoder/transformer/group_{g}/inner_group_{i}/"
            for name in ("query", "key", "value"):
                shapes[block + f"attention_1/self/{name}/kernel"] = (H, H)
                shapes[block + f"attention_1/self/{name}/bias"] = (H,)
            shapes[block + "attention_1/output/dense/kernel"] = (H, H)
            shapes[block + "attention_1/output/dense/bias"] = (H,)
            shapes[block + "LayerNorm/gamma"] = (H,)
            shapes[block + "LayerNorm/beta"] = (H,)
            shapes[block + "ffn_1/intermediate/dense/kernel"] = (H, F)
            shapes[block + "ffn_1/intermediate/dense/bias"] = (F,)
            shapes[block + "ffn_1/intermediate/output/dense/kernel"] = (F, H)
            shapes[block + "ffn_1/intermediate/output/dense/bias"] = (H,)
            shapes[block + "LayerNorm_1/gamma"] = (H,)
            shapes[block + "LayerNorm_1/beta"] = (H,)
    if heads:
        shapes.update(
            {
                "cls/predictions/transform/dense/kernel": (H, E),
                "cls/predictions/transform/dense/bias": (E,),
                "cls/predictions/transform/LayerNorm/gamma": (E,),
                "cls/predictions/transform/LayerNorm/beta": (E,),
                "cls/predictions/output_bias": (V,),
                "cls/seq_relationship/output_weights": (2, H),
                "cls/seq_relationship/output_bias": (2,),
            }
        )
    return shapes


def random_arrays(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.normal(0.0, 0.3, shape).astype("float32") for name, shape in shapes.items()}


def write_tf1(prefix, arrays):
    """Writes `arrays` under exactly their names with TF's own checkpoint op (no `checkpoint` file)."""
    import tensorflow as tf

    names = sorted(arrays)
    tf.io.gfile.makedirs(str(pathlib.Path(prefix).parent))
    tf.raw_ops.SaveV2(
        prefix=str(prefix),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[arrays[n] for n in names],
    )


def read_tf1(prefix):
    """Every weight of a TF1 checkpoint: name -> array (not `global_step`, which
    `albert.checkpoints.tf1.stored_global_step` reads)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    names = set(reader.get_variable_to_shape_map()) - {"global_step"}
    return {name: reader.get_tensor(name) for name in names}


def parity_inputs():
    data = np.load(FIXTURES / "hf_grouped" / "parity.npz")
    return {k: data[k] for k in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")}

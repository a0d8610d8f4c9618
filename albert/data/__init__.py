"""Data layer: tokenizer-independent readers, TFRecords, tf.data pipelines."""

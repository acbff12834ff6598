"""The network: encoders, bridges, decoders, the model that joins them, and its search.

What is written to disk and read back is `interlingua.model_files`'s."""

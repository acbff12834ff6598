"""Neural building blocks: encoders, bridges, decoders, the model that joins them, its search and its checkpoints."""

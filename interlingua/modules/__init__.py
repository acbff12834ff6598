"""Neural building blocks: encoders, bridges, decoders, and the model that joins them."""

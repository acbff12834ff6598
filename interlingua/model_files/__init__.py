"""A trained model on disk: checkpoints, model folders and their cards, CTranslate2 exports, and loading either
kind of file into a `LoadedModel` (the network of `interlingua.modules` with what is recorded of its weights)."""

"""vLLM's formats: its KV-cache event codec (`kv_events`), its prefix-cache block hashes
(`block_hashing`), a model's tokenizer and chat template as vLLM applies them
(`hf_tokenizer`), and the prompt's token ids by either tokenizer (`prompt_tokens`, with
the emulator's documented rule). The picker hashes and decodes with them; the emulator
publishes, hashes and renders with them."""

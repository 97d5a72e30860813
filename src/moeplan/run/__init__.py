"""The run: its record (:mod:`.config`), the parallel layout (:mod:`.parallel`), the attention kernel a run gets
(:mod:`.attention_backend`) and the strategy file (:mod:`.strategy`). Built on the models, the hardware and the
foundation; the engine and the Megatron readers/exports both stand on it."""

"""The cost model: parameters and FLOPs, activations and memory, timing, the step estimate, the timeline,
Megatron-FSDP and Muon. Reads a run; never imports the Megatron readers/exports (a sibling layer)."""

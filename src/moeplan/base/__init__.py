"""The foundation: errors, vocabulary, argument checks, output files, Transformer Engine releases and the
Megatron-Core field table with its version rules. Imports nothing else of moeplan; every layer above may use it."""

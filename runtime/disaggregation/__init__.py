"""Prefill-decode disaggregation: a prefill server computes a prompt's KV and first token, a
decode server receives them and generates the rest (behind SGLang's router in PD mode)."""

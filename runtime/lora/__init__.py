"""Multi-LoRA serving: adapters read from PEFT folders (`adapter`), their device slots inside the
model (`layers`), the scheduler's manager of loads, slots and eviction (`manager`), the flags'
and routes' adapter references (`paths`) and the manager's construction from the flags
(`startup`). The computation is the typed op `sglang.ops.lora`."""

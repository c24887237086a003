"""The flashinfer kernel family: FlashInfer's paged attention, norms, rotary, activation, sampling."""

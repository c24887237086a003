"""What the server tells operators about itself: OpenTelemetry spans of every request's stages
(`tracing`, `stage_spans`) and Prometheus metrics under upstream SGLang's names (`metrics`)."""

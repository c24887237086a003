"""smg's gRPC worker mode (`sglang serve --smg-grpc-mode`): the `sglang.grpc.scheduler.SglangScheduler`
service of the `smg-grpc-proto` package, in front of the same tokenizer manager the HTTP API uses.

smg tokenizes, applies chat templates and parses tools itself; the worker runs token ids. Nothing
here is imported unless gRPC mode is on: grpcio and the stubs are the optional `grpc` extra.
"""

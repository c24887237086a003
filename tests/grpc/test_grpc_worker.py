"""`sglang serve --smg-grpc-mode` from a grpcio client on smg-grpc-proto's stubs, over a real
socket: every RPC of `SglangScheduler`, the standard health service, the HTTP sidecar, and a
cancelled or aborted call freeing its request. One worker serves the whole module."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from smg_grpc_proto import sglang_scheduler_pb2 as pb
from smg_grpc_proto.generated import common_pb2

from sglang.ci.servers import ServerGroup, wait_until
from sglang.runtime.loader.tokenizer import load_tokenizer
from sglang.runtime.server.grpc.request import generate_input, trace_context
from sglang.runtime.server_args import ServerArgs

from .workers import GrpcWorker, start_grpc_worker

TIMEOUT_S = 120


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcWorker]:
    with ServerGroup(tmp_path_factory.mktemp("grpc")) as services:
        worker = start_grpc_worker(services)
        worker.sidecar.wait_ready()
        yield worker


@pytest.fixture(scope="module")
def channel(worker: GrpcWorker) -> Iterator[grpc.Channel]:
    with worker.channel() as channel:
        yield channel


def _request(rid: str, ids: list[int], stream: bool = False, **params: object) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id=rid,
        tokenized=pb.TokenizedInput(input_ids=ids),
        sampling_params=pb.SamplingParams(temperature=0.0, skip_special_tokens=True, **params),
        stream=stream,
    )


def _complete(stub, request: pb.GenerateRequest) -> list[pb.GenerateComplete]:
    return [r.complete for r in stub.Generate(request, timeout=TIMEOUT_S) if r.HasField("complete")]


def test_proto_zero_values_mean_the_defaults() -> None:
    """A field left out reads as 0 in proto3: those that are `optional` count only when set,
    and a 0 that no caller could mean (top_p, top_k, repetition_penalty, n) is the default."""
    request = pb.GenerateRequest(request_id="r", tokenized=pb.TokenizedInput(input_ids=[1, 2]))
    params = generate_input(request, None).sampling_params
    assert params["max_new_tokens"] is None and "stream_interval" not in params
    assert (params["top_p"], params["top_k"], params["repetition_penalty"], params["n"]) == (1.0, -1, 1.0, 1)
    request.sampling_params.max_new_tokens = 0  # present: a real 0 (prefill only)
    request.sampling_params.ebnf_grammar = 'root ::= "a"'
    params = generate_input(request, None).sampling_params
    assert params["max_new_tokens"] == 0 and params["ebnf"] == 'root ::= "a"'
    metadata = (("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), ("x-other", "1"))
    assert trace_context(metadata) == {"traceparent": metadata[0][1]}
    assert trace_context((("x-other", "1"),)) is None
    assert generate_input(request, trace_context(metadata)).trace_context == {"traceparent": metadata[0][1]}


def test_grpc_mode_is_an_alias() -> None:
    """Upstream's older `--grpc-mode` turns on `--smg-grpc-mode`."""
    assert ServerArgs(grpc_mode=True).smg_grpc_mode and not ServerArgs().smg_grpc_mode


def test_http_mode_never_imports_grpc() -> None:
    """grpcio is an optional extra: the server's modules import without it."""
    probe = (
        "import sys, sglang.cli, sglang.runtime.server.serve, sglang.runtime.server.app\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'grpc_health', 'smg_grpc_proto')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_every_rpc(worker: GrpcWorker, channel: grpc.Channel) -> None:
    stub = worker.stub(channel)
    info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=30)
    assert info.is_generation and info.vocab_size > 0 and list(info.eos_token_ids)
    assert Path(info.tokenizer_path).is_dir()  # smg loads the tokenizer from here
    tokenizer = load_tokenizer(Path(info.tokenizer_path))
    ids = tokenizer.encode("The capital of France is")

    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert stub.HealthCheck(pb.HealthCheckRequest(), timeout=60).healthy

    # Non-streaming and streaming: the same greedy tokens; the stream's chunks add up to them.
    [whole] = _complete(stub, _request("plain", ids, max_new_tokens=6, ignore_eos=True))
    assert len(whole.output_ids) == 6 and whole.finish_reason == "length" and whole.prompt_tokens == len(ids)
    responses = list(stub.Generate(_request("streamed", ids, stream=True, max_new_tokens=6, ignore_eos=True)))
    chunks = [r.chunk for r in responses if r.HasField("chunk")]
    assert [t for c in chunks for t in c.token_ids] == list(whole.output_ids)
    assert responses[-1].HasField("complete") and responses[-1].complete.finish_reason == "length"
    assert responses[-1].complete.cached_tokens > 0  # the same prompt again: from the prefix cache

    # Stop token and stop string: finish reason "stop" with what matched.
    [by_token] = _complete(stub, _request("stop-id", ids, max_new_tokens=6, stop_token_ids=[whole.output_ids[2]]))
    assert by_token.finish_reason == "stop" and by_token.matched_token_id == whole.output_ids[2]
    word = tokenizer.decode(list(whole.output_ids)).split()[0]
    [by_text] = _complete(stub, _request("stop-str", ids, max_new_tokens=6, stop=[word]))
    assert by_text.finish_reason == "stop" and by_text.matched_stop_str == word

    # A regex constraint, and n > 1 with indices.
    [digits] = _complete(stub, _request("regex", ids, max_new_tokens=8, regex="[0-9]{3}"))
    assert re.fullmatch("[0-9]{3}", tokenizer.decode(list(digits.output_ids), skip_special_tokens=True))
    samples = _complete(stub, _request("n", ids, max_new_tokens=3, n=2))
    assert sorted(s.index for s in samples) == [0, 1]

    # Bad input is INVALID_ARGUMENT; RPCs this server lacks say UNIMPLEMENTED and why.
    with pytest.raises(grpc.RpcError) as bad:
        list(stub.Generate(pb.GenerateRequest(request_id="empty"), timeout=30))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "input_ids" in bad.value.details()
    with pytest.raises(grpc.RpcError) as missing:
        stub.Embed(pb.EmbedRequest(), timeout=30)
    assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED and "Embed" in missing.value.details()

    server = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=30)
    assert server.server_type == "grpc" and server.server_args["smg_grpc_mode"] is True
    assert server.max_total_num_tokens > 0
    loads = stub.GetLoads(pb.GetLoadsRequest(), timeout=30)
    assert loads.dp_rank_count == 1 and loads.loads[0].max_total_num_tokens > 0 and loads.loads[0].cache_hit_rate > 0
    assert not stub.Abort(pb.AbortRequest(request_id="no-such-request"), timeout=30).success
    assert stub.FlushCache(common_pb2.FlushCacheRequest(), timeout=30).success

    # The HTTP sidecar on --port + 1: health, and the requests above in the metrics.
    assert httpx.get(worker.sidecar.url + "/health", timeout=30).status_code == 200
    assert worker.sidecar.metric_total("sglang:num_requests_total") >= 7


def test_cancel_and_abort_free_the_request(worker: GrpcWorker, channel: grpc.Channel) -> None:
    """A call its client cancels aborts its request; so does the Abort RPC, whose stream then
    ends with finish reason "abort". Either way the scheduler holds nothing after."""
    stub = worker.stub(channel)
    long = {"max_new_tokens": 2000, "ignore_eos": True}
    call = stub.Generate(_request("cancelled", [1, 2, 3, 4], stream=True, **long), timeout=TIMEOUT_S)
    next(call)  # the request runs
    assert worker.running(stub) == 1
    call.cancel()
    wait_until(lambda: worker.running(stub) == 0, timeout=30, what="the cancelled request freed")

    responses: list[pb.GenerateResponse] = []
    reader = threading.Thread(
        target=lambda: responses.extend(stub.Generate(_request("aborted", [5, 6, 7], stream=True, **long)))
    )
    reader.start()
    wait_until(lambda: worker.running(stub) == 1, timeout=30, what="the request to abort running")
    assert stub.Abort(pb.AbortRequest(request_id="aborted"), timeout=30).success
    reader.join(timeout=60)
    assert responses[-1].complete.finish_reason == "abort"
    assert worker.running(stub) == 0

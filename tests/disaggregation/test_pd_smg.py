"""Prefill-decode disaggregation behind smg 1.13: one prefill and one decode server of ours on
cpu, `smg launch --pd-disaggregation --prefill URL BOOTSTRAP_PORT --decode URL`, real processes
over real sockets (KV over the tcp transfer backend).

- greedy outputs through smg (native /generate and OpenAI chat) are the tokens one unified
  server gives (the decode server answering the same requests without bootstrap fields, which
  it serves in one piece);
- the KV bytes each side counts equal the prompt tokens times what the layout declares;
- an abort on the decode side while it waits for KV frees its reservation and the room at the
  prefill server; a prefill that fails (its prompt does not fit the prefill pool) fails the
  decode request with the reason, and both pools are full again afterwards.

Cost: two servers and smg (about 40 s on a quiet 2-core machine), a dozen short requests.
"""

from __future__ import annotations

import random
import threading
import time

import httpx
import pytest

from sglang.ci.servers import ServerGroup, wait_until

from ..clients.venvs import Venv
from .pd_fleet import (
    DECODE_KV_TOKENS,
    PREFILL_KV_TOKENS,
    PROMPTS,
    PDFleet,
    assert_pool_full,
    chat,
    generate,
    kv_status,
    start_pd_fleet,
)


@pytest.fixture(scope="module")
def fleet(services: ServerGroup, smg_venv: Venv) -> PDFleet:
    return start_pd_fleet(services, smg_venv)


def test_greedy_through_smg_matches_unified_and_moves_the_declared_bytes(fleet: PDFleet) -> None:
    assert fleet.router is not None
    before_p, before_d = kv_status(fleet.prefill), kv_status(fleet.decode)
    prompt_tokens = 0
    for text in PROMPTS:
        unified = generate(fleet.decode, text)
        through = generate(fleet.router, text)
        assert through["output_ids"] == unified["output_ids"], (text, through, unified)
        assert through["meta_info"]["finish_reason"] == unified["meta_info"]["finish_reason"]
        prompt_tokens += through["meta_info"]["prompt_tokens"]
    # A grammar holds from the prefill's first token through the decode server's tokens.
    constrained = {"regex": "(yes|no), because [a-z ]+\\."}
    unified = generate(fleet.decode, "Is the sky blue? Answer:", constrained)
    through = generate(fleet.router, "Is the sky blue? Answer:", constrained)
    assert through["output_ids"] == unified["output_ids"] and through["text"].startswith(("yes, ", "no, "))
    prompt_tokens += through["meta_info"]["prompt_tokens"]
    unified_chat = chat(fleet.decode, PROMPTS[1])
    through_chat = chat(fleet.router, PROMPTS[1])
    assert through_chat["choices"][0]["message"] == unified_chat["choices"][0]["message"]
    prompt_tokens += through_chat["usage"]["prompt_tokens"]

    after_p, after_d = kv_status(fleet.prefill), kv_status(fleet.decode)
    assert after_p["kv_transfers_sent"] - before_p["kv_transfers_sent"] == len(PROMPTS) + 2
    assert after_d["kv_transfers_received"] - before_d["kv_transfers_received"] == len(PROMPTS) + 2
    per_token = after_p["kv_bytes_per_token"]
    # SmolLM2-135M in fp32: 30 layers of K and V, 3 KV heads of 64 values, 4 bytes each.
    assert per_token == after_d["kv_bytes_per_token"] == 30 * 2 * 3 * 64 * 4
    sent = after_p["kv_transfer_bytes_sent"] - before_p["kv_transfer_bytes_sent"]
    received = after_d["kv_transfer_bytes_received"] - before_d["kv_transfer_bytes_received"]
    assert sent == received == prompt_tokens * per_token
    assert after_d["kv_transfers_failed"] == before_d["kv_transfers_failed"]


def test_aborts_on_either_side_free_both(fleet: PDFleet) -> None:
    # Decode side: a request waits for a room no prefill has served yet, and is aborted.
    room = random.getrandbits(62)
    answers: dict[str, httpx.Response] = {}
    body = {"text": PROMPTS[0], "rid": f"pd-abort-{room}", "sampling_params": {"max_new_tokens": 8}}
    body |= fleet.bootstrap(room)
    waiting = threading.Thread(
        target=lambda: answers.setdefault("decode", httpx.post(f"{fleet.decode.url}/generate", json=body, timeout=60))
    )
    waiting.start()
    wait_until(lambda: kv_status(fleet.decode)["kv_tokens_in_use"] > kv_status(fleet.decode)["kv_tokens_cached"], 30)
    aborted = httpx.post(f"{fleet.decode.url}/abort_request", json={"rid": body["rid"]}, timeout=30).json()
    assert aborted["aborted"] is True
    waiting.join(60)
    assert answers["decode"].json()["meta_info"]["finish_reason"]["type"] == "abort"
    # The prefill for the cancelled room still runs; its KV is dropped, not kept for a fetch.
    generate(fleet.prefill, PROMPTS[0], **fleet.bootstrap(room))
    time.sleep(0.5)
    assert kv_status(fleet.prefill)["kv_transfer_rooms_pending"] == 0

    # Prefill side: the prompt fits the decode pool, not the prefill's, so the prefill fails.
    ids = [random.randrange(1000, 2000) for _ in range((PREFILL_KV_TOKENS + DECODE_KV_TOKENS) // 2)]
    room = random.getrandbits(62)
    failing = {"input_ids": ids, "sampling_params": {"max_new_tokens": 4}} | fleet.bootstrap(room)
    answers.clear()
    post = httpx.post
    on_decode = threading.Thread(
        target=lambda: answers.setdefault("decode", post(f"{fleet.decode.url}/generate", json=failing, timeout=60))
    )
    on_decode.start()
    prefilled = httpx.post(f"{fleet.prefill.url}/generate", json=failing, timeout=60).json()
    on_decode.join(60)
    assert prefilled["meta_info"]["finish_reason"]["type"] == "abort"
    failed = answers["decode"]
    assert failed.status_code == 500, failed.text  # a failure of the fleet, not of the request
    message = failed.json()["error"]["message"]
    assert "KV transfer failed" in message and "do not fit" in message, message
    for server in (fleet.prefill, fleet.decode):
        assert_pool_full(server)
    assert kv_status(fleet.prefill)["kv_transfer_rooms_pending"] == 0

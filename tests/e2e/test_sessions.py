"""Upstream's sessions against a real server: a turn continued by `session_params` runs on the
earlier turn's prompt and output followed by its own prompt (the same tokens and text as that
sequence sent whole), served from the prefix cache; bad session requests are 400s."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

QUESTION = "Name a colour of the rainbow."


def _generate(http: httpx.Client, **body: Any) -> httpx.Response:
    sampling = {"max_new_tokens": 8, "temperature": 0}
    return http.post("/generate", json={"sampling_params": sampling, "return_prompt_token_ids": True, **body})


def test_a_turn_continues_the_previous_one(http: httpx.Client) -> None:
    sid = http.post("/open_session", json={"capacity_of_str_len": 1000}).json()
    assert isinstance(sid, str) and sid
    first = _generate(http, text=QUESTION, rid=f"t1-{sid}", session_params={"id": sid}).json()
    second = _generate(http, text=" Another one:", session_params={"id": sid, "rid": f"t1-{sid}"}).json()
    ids = first["meta_info"]["prompt_token_ids"] + first["output_ids"]
    assert second["meta_info"]["prompt_token_ids"][: len(ids)] == ids
    assert second["meta_info"]["cached_tokens"] >= len(first["meta_info"]["prompt_token_ids"])
    whole = _generate(http, input_ids=second["meta_info"]["prompt_token_ids"]).json()
    assert whole["output_ids"] == second["output_ids"] and whole["text"] == second["text"]
    branch = _generate(http, text=" Red.", session_params={"id": sid, "rid": f"t1-{sid}", "offset": 3}).json()
    assert branch["meta_info"]["prompt_token_ids"][:3] == ids[:3]
    assert http.post("/close_session", json={"session_id": sid}).status_code == 200
    gone = _generate(http, text="Hi", session_params={"id": sid})
    assert gone.status_code == 400 and "does not exist" in gone.text


def test_session_refusals(http: httpx.Client) -> None:
    sid = f"fixed-{uuid.uuid4().hex}"
    assert http.post("/open_session", json={"capacity_of_str_len": 10, "session_id": sid}).json() == sid
    again = http.post("/open_session", json={"capacity_of_str_len": 10, "session_id": sid})
    assert again.status_code == 400 and "already open" in again.text
    streaming = http.post("/open_session", json={"capacity_of_str_len": 10, "streaming": True})
    assert streaming.status_code == 400 and "--enable-streaming-session" in streaming.text
    unknown_turn = _generate(http, text="Hi", session_params={"id": sid, "rid": "nope"})
    assert unknown_turn.status_code == 400 and "nope" in unknown_turn.text
    for bad in ({"id": sid, "offset": "3"}, {"id": sid, "extra": 1}, "s"):
        assert _generate(http, text="Hi", session_params=bad).status_code == 400, bad
    n2 = http.post(
        "/generate",
        json={"text": "Hi", "sampling_params": {"n": 2, "max_new_tokens": 2}, "session_params": {"id": sid}},
    )
    assert n2.status_code == 400 and "one sequence" in n2.text
    chat = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "session_params": {"id": sid}},
    )
    assert chat.status_code == 400 and "session" in chat.text
    assert http.post("/close_session", json={"session_id": sid}).status_code == 200
    assert http.post("/close_session", json={"session_id": sid}).status_code == 200

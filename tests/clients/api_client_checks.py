"""Checks of our server through the official `anthropic` and `ollama` Python clients, run in
the client's own venv (test_api_clients.py starts it; only the client package is imported).

    python api_client_checks.py --client anthropic|ollama --url URL --api-key KEY --out FILE

Each check is a function; the runner writes one JSON line per check ({"check", "ok", "error",
"seconds"}) so that the test reports each one on its own. The model is SmolLM2-135M: a check
asserts protocol and structure, and content only where greedy decoding makes it reproducible
(a stream equals the same request unstreamed) or a grammar forces it (the tool call).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

QUESTION = "What is the capital of France?"
GREEDY = {"temperature": 0}
"""Anthropic's client has no sampling arguments any more; the API still takes them as body fields."""
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    # An enum keeps the forced call short whatever the model writes: the grammar allows only these.
    "input_schema": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]},
}


# ---- anthropic ---------------------------------------------------------------------------------


def anthropic_checks(url: str, key: str) -> dict[str, Callable[[], None]]:
    import anthropic

    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=600)
    model = "default"
    user = [{"role": "user", "content": QUESTION}]

    def plain() -> None:
        reply = client.messages.create(model=model, max_tokens=8, messages=user, extra_body=GREEDY)
        assert (reply.type, reply.role, reply.model) == ("message", "assistant", model)
        assert reply.content[0].type == "text" and reply.content[0].text
        assert reply.stop_reason in ("end_turn", "max_tokens") and 0 < reply.usage.output_tokens <= 8
        assert reply.id.startswith("msg_")

    def system_prompt() -> None:
        system = "You answer in one word."
        reply = client.messages.create(model=model, max_tokens=4, system=system, messages=user, extra_body=GREEDY)
        counted = client.messages.count_tokens(model=model, system=system, messages=user)
        without = client.messages.count_tokens(model=model, messages=user)
        assert reply.usage.input_tokens == counted.input_tokens != without.input_tokens

    def count_tokens() -> None:
        short = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "Hi"}])
        longer = client.messages.count_tokens(model=model, messages=user)
        assert 0 < short.input_tokens < longer.input_tokens

    def streaming() -> None:
        whole = client.messages.create(model=model, max_tokens=8, messages=user, extra_body=GREEDY)
        with client.messages.stream(model=model, max_tokens=8, messages=user, extra_body=GREEDY) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_message()
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and kinds[-2] == "message_delta"
        assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 1
        assert final.content[0].text == whole.content[0].text  # greedy: the same text either way
        assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens

    def stop_sequences() -> None:
        free = client.messages.create(model=model, max_tokens=8, messages=user, extra_body=GREEDY).content[0].text
        word = free.split()[2]
        reply = client.messages.create(
            model=model, max_tokens=8, messages=user, extra_body=GREEDY, stop_sequences=[word]
        )
        assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", word), reply
        assert free.startswith(reply.content[0].text) and word not in reply.content[0].text

    def tool_use_round_trip() -> None:
        asked = [{"role": "user", "content": "What is the weather in Paris?"}]
        forced = {"type": "tool", "name": "get_weather"}
        call = client.messages.create(
            model=model, max_tokens=40, messages=asked, tools=[WEATHER_TOOL], tool_choice=forced
        )
        assert call.stop_reason == "tool_use", call
        (use,) = [block for block in call.content if block.type == "tool_use"]
        assert use.name == "get_weather" and use.input["city"] in ("Paris", "Rome") and use.id.startswith("toolu_")
        result = {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"}
        turns = [*asked, {"role": "assistant", "content": call.content}, {"role": "user", "content": [result]}]
        answer = client.messages.create(
            model=model, max_tokens=8, messages=turns, tools=[WEATHER_TOOL], extra_body=GREEDY
        )
        assert answer.stop_reason in ("end_turn", "max_tokens") and answer.content[0].type == "text"
        # Streamed, forced by "any" (one call: the grammar lets a parallel list run past max_tokens).
        any_one = {"type": "any", "disable_parallel_tool_use": True}
        tools = [WEATHER_TOOL]
        with client.messages.stream(
            model=model, max_tokens=40, messages=asked, tools=tools, tool_choice=any_one
        ) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use" and final.content[-1].input["city"] in ("Paris", "Rome"), final

    def structured_output() -> None:
        schema = {"type": "object", "properties": {"capital": {"enum": ["Paris", "Lyon"]}}, "required": ["capital"]}
        config = {"format": {"type": "json_schema", "schema": schema}}
        reply = client.messages.create(model=model, max_tokens=20, messages=user, output_config=config)
        assert json.loads(reply.content[0].text)["capital"] in ("Paris", "Lyon"), reply

    def error_shape() -> None:
        refusals: list[tuple[type[Exception], dict[str, Any], str, anthropic.Anthropic]] = [
            (anthropic.BadRequestError, {"max_tokens": 0}, "invalid_request_error", client),
            (anthropic.NotFoundError, {"model": "claude-unknown"}, "not_found_error", client),
            (anthropic.AuthenticationError, {}, "authentication_error", client.with_options(api_key="wrong")),
        ]
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
        images = [{"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}]
        refusals.append((anthropic.BadRequestError, {"messages": images}, "invalid_request_error", client))
        for error, override, kind, caller in refusals:
            try:
                caller.messages.create(**{"model": model, "max_tokens": 4, "messages": user, **override})
            except error as e:
                assert e.body == {"type": "error", "error": {"type": kind, "message": e.body["error"]["message"]}}
            else:
                raise AssertionError(f"{override} was accepted")
        try:
            client.messages.create(model=model, max_tokens=4, messages=images)
        except anthropic.BadRequestError as e:
            assert "text-only" in e.body["error"]["message"]

    return {
        f.__name__: f
        for f in (
            plain,
            system_prompt,
            count_tokens,
            streaming,
            stop_sequences,
            tool_use_round_trip,
            structured_output,
            error_shape,
        )
    }


# ---- ollama ------------------------------------------------------------------------------------


def ollama_checks(url: str, key: str) -> dict[str, Callable[[], None]]:
    import ollama

    client = ollama.Client(host=url, headers={"Authorization": f"Bearer {key}"}, timeout=600)
    model = client.list().models[0].model
    messages = [{"role": "user", "content": QUESTION}]
    options = {"num_predict": 6, "temperature": 0}

    def list_models() -> None:
        (entry,) = client.list().models
        assert entry.model == model and entry.digest and entry.details is not None and entry.modified_at is not None

    def running_models() -> None:
        (entry,) = client.ps().models
        assert entry.model == model and entry.details is not None and entry.size_vram == 0
        assert entry.context_length and entry.context_length > 0
        assert entry.expires_at is not None and entry.expires_at.year > datetime.now(UTC).year + 100  # never unloaded

    def show() -> None:
        shown = client.show(model)
        assert shown.details is not None and shown.details.family
        assert shown.modelinfo and any(k.endswith("context_length") for k in shown.modelinfo)
        assert "num_ctx" in (shown.parameters or "") and shown.capabilities

    def chat() -> None:
        whole = client.chat(model=model, messages=messages, options=options)
        assert whole.done and whole.done_reason in ("stop", "length") and whole.message.role == "assistant"
        assert whole.message.content and 0 < (whole.eval_count or 0) <= 6 and (whole.prompt_eval_count or 0) > 0
        parts = list(client.chat(model=model, messages=messages, options=options, stream=True))
        assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True] and len(parts) > 1
        assert "".join(p.message.content or "" for p in parts) == whole.message.content  # greedy
        assert parts[-1].eval_count == whole.eval_count and (parts[-1].total_duration or 0) > 0

    def generate() -> None:
        whole = client.generate(model=model, prompt=QUESTION, system="Answer briefly.", options=options)
        assert whole.done and whole.response and 0 < (whole.eval_count or 0) <= 6
        parts = list(
            client.generate(model=model, prompt=QUESTION, system="Answer briefly.", options=options, stream=True)
        )
        assert parts[-1].done and not any(p.done for p in parts[:-1])
        assert "".join(p.response or "" for p in parts) == whole.response
        raw = client.generate(model=f"{model}:latest", prompt="The capital of France is", raw=True, options=options)
        assert raw.done and raw.response

    def options_limit_tokens() -> None:
        short = client.chat(
            model=model, messages=[{"role": "user", "content": "Write a long story."}], options={"num_predict": 3}
        )
        assert (short.eval_count, short.done_reason) == (3, "length")

    def error_shape() -> None:
        for call, status in (
            (lambda: client.chat(model="unknown-model", messages=messages), 404),
            (lambda: client.chat(model=model, messages=messages, options={"mirostat": 2}), 400),
            (lambda: client.generate(model=model, prompt="Hi", images=["iVBORw0KGgo="]), 400),
            (lambda: client.embed(model=model, input="Hi"), 400),  # a generative model: no embeddings
            (lambda: client.embeddings(model=model, prompt="Hi"), 400),
        ):
            try:
                call()
            except ollama.ResponseError as e:
                assert e.status_code == status and e.error and not e.error.startswith("{"), (e.status_code, e.error)
            else:
                raise AssertionError("the request was accepted")

    checks = (list_models, running_models, show, chat, generate, options_limit_tokens, error_shape)
    return {f.__name__: f for f in checks}


CLIENTS = {"anthropic": anthropic_checks, "ollama": ollama_checks}
CHECK_NAMES = {
    "anthropic": (
        "plain",
        "system_prompt",
        "count_tokens",
        "streaming",
        "stop_sequences",
        "tool_use_round_trip",
        "structured_output",
        "error_shape",
    ),
    "ollama": ("list_models", "running_models", "show", "chat", "generate", "options_limit_tokens", "error_shape"),
}
"""The checks of each client, for the test to list before the venv runs them (`main` checks
they are the factories' own)."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=sorted(CLIENTS), required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("checks", nargs="*", help="run only these (default: all)")
    args = parser.parse_args()
    checks = CLIENTS[args.client](args.url, args.api_key)
    assert tuple(checks) == CHECK_NAMES[args.client], list(checks)
    with open(args.out, "w") as out:
        for name in args.checks or list(checks):
            started = time.monotonic()
            try:
                checks[name]()
                record: dict[str, Any] = {"check": name, "ok": True, "error": None}
            except Exception:
                record = {"check": name, "ok": False, "error": traceback.format_exc()}
            record["seconds"] = round(time.monotonic() - started, 2)
            out.write(json.dumps(record) + "\n")
            out.flush()


if __name__ == "__main__":
    main()

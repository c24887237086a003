"""The `sglang` command line: `sglang serve`, `sglang generate`, `sglang ops`, `sglang build-kernels`
and `sglang conformance`.

Every runtime flag comes from `ServerArgs`, so `sglang serve --help`, `sglang generate --help`
and `python -m sglang.launch_server --help` list the same settings with the same defaults.
"""

from __future__ import annotations

import argparse
import logging
import sys


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _server_args(args: argparse.Namespace):
    from sglang.runtime.server_args import ServerArgs

    return ServerArgs.from_cli_args(args)


def _serve(args: argparse.Namespace) -> int:
    from sglang.runtime.server.serve import serve

    return serve(_server_args(args))


def _generate(args: argparse.Namespace) -> int:
    from sglang.runtime.engine import Engine

    server_args = _server_args(args)
    with Engine(**vars(server_args)) as engine:
        if args.raw:
            prompt = args.prompt
        else:
            messages = [{"role": "user", "content": args.prompt}]
            prompt = engine.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        params = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature}
        printed = 0
        for chunk in engine.generate(prompt, params, stream=True):
            sys.stdout.write(chunk["text"][printed:])
            sys.stdout.flush()
            printed = len(chunk["text"])
        sys.stdout.write("\n")
    return 0


def _ops(args: argparse.Namespace) -> int:
    import json

    from sglang.runtime.loader.op_report import op_table

    assume_missing = [p.strip() for p in (args.assume_missing or "").split(",") if p.strip()]
    table = op_table(_server_args(args), assume_missing)
    print(json.dumps(table.as_dict(), indent=2) if args.json else table.render())
    return 0


def _build_kernels(args: argparse.Namespace) -> int:
    """Runs the probe of every kernel family of this machine's platform (a probe builds what it
    needs, with its progress logged); 1 when one fails, whose ops then go to the next family."""
    from sglang.platforms import select_platform
    from sglang.platforms.kernels.registry import family, probe_failure

    platform = select_platform()
    failed = 0
    for name in (n for n in platform.kernel_families if family(n).probe is not None):
        reason = probe_failure(name)
        print(f"{platform.name} {name}: {'ready' if reason is None else reason}")
        failed += reason is not None
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    from sglang.runtime.server_args import ServerArgs

    parser = argparse.ArgumentParser(
        prog="sglang",
        description="SGLang-compatible LLM serving on any device. Without --model-path, the embedded "
        "SmolLM2-135M-Instruct is served.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve", help="run the HTTP server (SGLang native API and OpenAI API)",
        description="Run the HTTP server: SGLang's native API (/generate, ...) and the OpenAI API (/v1/...).",
    )  # fmt: skip
    ServerArgs.add_cli_args(serve)
    serve.set_defaults(run=_serve)
    generate = commands.add_parser(
        "generate", help="generate once from a prompt and print the text",
        description="Load the model, generate from one prompt (as a chat message unless --raw), print the text.",
    )  # fmt: skip
    generate.add_argument("--prompt", required=True, help="The prompt (a user message unless --raw).")
    generate.add_argument("--max-new-tokens", type=int, default=128, help="Most tokens to generate.")
    generate.add_argument("--temperature", type=float, default=0.0, help="Sampling temperature; 0 is greedy.")
    generate.add_argument("--raw", action="store_true", help="Send the prompt as is, without the chat template.")
    ServerArgs.add_cli_args(generate)
    generate.set_defaults(run=_generate)
    ops = commands.add_parser(
        "ops", help="print the kernel chosen for every op on a device, and why the others lost",
        description="Print the op table `sglang serve` would bind for this device, dtype and model (its config "
        "only; no weights are loaded): the chosen kernel family and candidate of every op, and for each other "
        "candidate why it lost. For a device this machine lacks, the table is the declared one, with vendor "
        "packages assumed present unless --assume-missing names them.",
    )  # fmt: skip
    ops.add_argument("--assume-missing", help="Comma-separated packages to treat as not importable (e.g. triton).")
    ops.add_argument("--json", action="store_true", help="Print the table as JSON.")
    ServerArgs.add_cli_args(ops)
    ops.set_defaults(run=_ops)
    build = commands.add_parser(
        "build-kernels",
        help="build (once per machine, cached) the kernels this machine's families compile",
        description="Build the kernels of every kernel family of this machine's platform that compiles its own "
        "(the cpu C++ kernels), with progress, into the cache (`$SGLANG_CACHE_DIR`). A server start builds them "
        "too when they are missing; a family whose build fails is ineligible and the next one serves.",
    )
    build.add_argument("--log-level", default="info", help="Logging level (the build logs its progress at info).")
    build.set_defaults(run=_build_kernels)
    commands.add_parser(
        "conformance", help="run the conformance suites against an installed platform and report",
        description="See `sglang conformance --help`.", add_help=False,
    )  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["conformance"]:
        # Its own parser: arguments after `--` go to pytest untouched.
        from sglang.ci.conformance import main as conformance

        return conformance(argv[1:])
    args = build_parser().parse_args(argv)
    _configure_logging(args.log_level)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        # Ctrl-C before the server was up (loading the model): the children are gone already.
        print("sglang: interrupted", file=sys.stderr)
        return 130
    except (ValueError, RuntimeError, OSError) as e:
        # Bad flags, an unavailable device, a model that does not load: say why, no traceback.
        logging.getLogger("sglang").debug("start-up failed", exc_info=True)
        print(f"sglang: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The program suite: SGLang programs written once, as upstream users write them, with their checks.

Each `check_*` function runs its programs on the *default* backend (`sgl.set_default_backend`),
exactly as upstream's `sglang.test.test_programs` does, and asserts what the program must
produce. `test_program_suite.py` runs every check on every backend.

The model behind the backends is SmolLM2-135M-Instruct: tiny, with weak knowledge. A check
asserts an answer only where this model gives it reliably (capitals it knows, a product it
copies into a calculator call); elsewhere it asserts structure and protocol: the regex, the
dtype, the JSON, the variables, the text the interpreter builds, the token counts.

Each `ProgramCase` declares the features its programs need (`Feature`), so that a backend that
lacks one skips the case with its declared reason instead of running it.
"""

from __future__ import annotations

import ast
import itertools
import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import sglang as sgl
from sglang.lang.ir import REGEX_FLOAT, REGEX_INT, REGEX_STR


class Feature(str, Enum):
    """What a program needs from a backend beyond a chat turn's `gen`."""

    TEXT_GEN = "text_gen"
    """`gen` outside an assistant turn: continuing raw text (a completion model)."""
    API_SPEC = "api_spec"
    """`num_api_spec_tokens`, measured through an API backend's `token_usage`."""
    SCORING = "scoring"
    """`select`: choices scored by their tokens' log-probabilities."""
    SGLANG_PARAMS = "sglang_params"
    """Sampling parameters beyond a chat API's own (`min_tokens`)."""


def completion_tokens(meta: dict[str, Any]) -> int:
    """Generated tokens of one `gen`, from the meta info of a native or an OpenAI backend."""
    if "completion_tokens" in meta:
        return int(meta["completion_tokens"])
    return int(meta["usage"]["completion_tokens"])


# ---------------------------------------------------------------------------------------------
# few-shot QA: run and run_batch


@sgl.function
def few_shot_qa(s, question):
    s += "The following are questions with answers.\n\n"
    s += "Q: What is the capital of France?\n"
    s += "A: Paris\n"
    s += "Q: What is the capital of Germany?\n"
    s += "A: Berlin\n"
    s += "Q: What is the capital of Italy?\n"
    s += "A: Rome\n"
    s += "Q: " + question + "\n"
    s += "A:" + sgl.gen("answer", stop="\n", max_tokens=16)


def check_few_shot_qa() -> None:
    state = few_shot_qa.run(question="What is the capital of the United Kingdom?", temperature=0)
    assert state["answer"].strip() == "London", state.text()
    assert state.text().endswith("A:" + state["answer"])

    questions = ["What is the capital of Japan?", "What is the capital city of China?", "What is the capital of Spain?"]
    states = few_shot_qa.run_batch([{"question": q} for q in questions], temperature=0)
    assert [s["answer"].strip() for s in states] == ["Tokyo", "Beijing", "Madrid"]
    for question, state in zip(questions, states, strict=True):
        assert "Q: " + question + "\nA:" in state.text()  # results come back in input order


# ---------------------------------------------------------------------------------------------
# multi-turn chat with roles


@sgl.function
def answer_mt_bench(s, question_1, question_2):
    s += sgl.system("You are a helpful assistant.")
    s += sgl.user(question_1)
    s += sgl.assistant(sgl.gen("answer_1", max_tokens=12))
    with s.user():
        s += question_2
    with s.assistant():
        s += sgl.gen("answer_2", max_tokens=12)


def check_multi_turn_chat() -> None:
    state = answer_mt_bench.run(
        question_1="What is the capital of France?", question_2="And the capital of Germany?", temperature=0
    )
    messages = state.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[0]["content"] == "You are a helpful assistant."
    assert messages[3]["content"] == "And the capital of Germany?"
    assert messages[2]["content"] == state["answer_1"].strip()
    assert messages[4]["content"] == state["answer_2"].strip()
    assert "Paris" in state["answer_1"], messages
    assert "Berlin" in state["answer_2"], messages


# ---------------------------------------------------------------------------------------------
# select, and multiple choice accuracy through select


@sgl.function
def true_or_false(s, statement):
    s += "Determine whether the statement below is True, False, or Unknown.\n"
    s += "Statement: The capital of France is Pairs.\n"
    s += "Answer: True\n"
    s += "Statement: " + statement + "\n"
    s += "Answer:" + sgl.select("answer", ["True", "False", "Unknown"])


def check_select() -> None:
    state = true_or_false.run(statement="The capital of Germany is Berlin.")
    assert state["answer"] in ("True", "False", "Unknown")
    assert state.text().endswith("Answer:" + state["answer"])
    meta = state.get_meta_info("answer")
    assert len(meta["normalized_prompt_logprobs"]) == 3
    # Each choice is scored over its own tokens: one or more entries, each with a finite logprob.
    for tokens in meta["input_token_logprobs"]:
        assert tokens and all(entry[0] is not None and entry[0] <= 0 for entry in tokens)
    best = max(range(3), key=lambda i: meta["normalized_prompt_logprobs"][i])
    assert ("True", "False", "Unknown")[best] == state["answer"]


@sgl.function
def capital_choice(s, country, choices):
    s += "The following are questions with answers.\n\n"
    s += "Q: What is the capital of Portugal?\nA: Lisbon\n"
    s += "Q: What is the capital of Greece?\nA: Athens\n"
    s += "Q: What is the capital of " + country + "?\nA: " + sgl.select("answer", choices)


CAPITAL_QUESTIONS: list[tuple[str, str, list[str]]] = [
    ("France", "Paris", ["Paris", "Lyon", "Nice"]),
    ("Japan", "Tokyo", ["Osaka", "Tokyo", "Kyoto"]),
    ("Italy", "Rome", ["Milan", "Naples", "Rome"]),
    ("Germany", "Berlin", ["Berlin", "Munich", "Hamburg"]),
    ("Spain", "Madrid", ["Barcelona", "Madrid", "Seville"]),
    ("the United Kingdom", "London", ["Manchester", "Liverpool", "London"]),
    ("China", "Beijing", ["Beijing", "Shanghai", "Shenzhen"]),
    ("Russia", "Moscow", ["Moscow", "Kazan", "Omsk"]),
    ("Egypt", "Cairo", ["Alexandria", "Cairo", "Luxor"]),
    ("Canada", "Ottawa", ["Toronto", "Vancouver", "Ottawa"]),
]


@sgl.function
def arithmetic_choice(s, question, choices):
    s += "2+5=7\n4+4=8\n1+5=6\n3+2=5\n"
    s += question + "=" + sgl.select("answer", choices)


ARITHMETIC_QUESTIONS: list[tuple[str, str, list[str]]] = [
    ("2+2", "4", ["3", "4", "5"]),
    ("1+2", "3", ["3", "4", "5"]),
    ("3+4", "7", ["6", "7", "8"]),
    ("5+3", "8", ["7", "8", "9"]),
    ("4+5", "9", ["8", "9", "7"]),
    ("2+3", "5", ["4", "5", "6"]),
    ("1+1", "2", ["2", "3", "4"]),
    ("3+3", "6", ["5", "6", "7"]),
    ("1+3", "4", ["5", "4", "3"]),
    ("2+5", "7", ["6", "7", "8"]),
]


def check_multiple_choice_accuracy() -> None:
    """Ten capitals and ten sums, three choices each (chance: 1/3), through select + run_batch.

    The model knows these capitals (greedy: 10/10) and does single-digit sums a little better
    than chance (greedy: 7/10); the bounds leave a margin of two answers for numeric noise.
    """
    for program, questions, key, at_least in (
        (capital_choice, CAPITAL_QUESTIONS, "country", 8),
        (arithmetic_choice, ARITHMETIC_QUESTIONS, "question", 5),
    ):
        states = program.run_batch([{key: q, "choices": choices} for q, _, choices in questions])
        answers = [state["answer"] for state in states]
        for answer, (_, _, choices) in zip(answers, questions, strict=True):
            assert answer in choices
        correct = sum(answer == truth for answer, (_, truth, _) in zip(answers, questions, strict=True))
        assert correct >= at_least > len(questions) / 3, f"{program}: {correct}/10 correct: {answers}"


# ---------------------------------------------------------------------------------------------
# integer and JSON decoding: regex and dtype


@sgl.function
def decode_int(s):
    s += "The number of hours in a day is " + sgl.gen_int("hours", max_tokens=8) + "\n"
    s += "The number of days in a week is " + sgl.gen_int("days", max_tokens=8) + "\n"


def check_decode_int() -> None:
    state = decode_int.run(temperature=0)
    for name in ("hours", "days"):
        assert re.fullmatch(REGEX_INT, state[name]), state[name]
        int(state[name])  # a dtype=int value parses as int
    assert int(state["days"]) == 7, state.text()
    assert "is " + state["hours"] + "\n" in state.text()


@sgl.function
def decode_json_regex(s):
    s += "Generate a JSON object to describe the basic city information of Paris.\n"
    s += "Here are the JSON object:\n"
    with s.var_scope("json_output"):
        s += "{\n"
        s += '  "name": ' + sgl.gen(regex=REGEX_STR, max_tokens=8) + ",\n"
        s += '  "population": ' + sgl.gen(regex=REGEX_INT, stop=[" ", "\n"], max_tokens=8) + ",\n"
        s += '  "area": ' + sgl.gen(regex=REGEX_INT, stop=[" ", "\n"], max_tokens=8) + ",\n"
        s += '  "latitude": ' + sgl.gen(regex=REGEX_FLOAT, stop=[" ", "\n"], max_tokens=8) + "\n"
        s += "}"


def check_decode_json() -> None:
    state = decode_json_regex.run(temperature=0)
    obj = json.loads(state["json_output"])
    assert list(obj) == ["name", "population", "area", "latitude"]
    assert isinstance(obj["name"], str)
    assert isinstance(obj["population"], int) and isinstance(obj["area"], int)
    assert isinstance(obj["latitude"], (int, float))


@sgl.function
def dtype_gen(s):
    s += "Q: What is the full name of DNS?\n"
    s += "A: The full names is " + sgl.gen("str_res", dtype=str, stop="\n", max_tokens=12) + "\n"
    s += "Q: Which year was DNS invented?\n"
    s += "A: " + sgl.gen("int_res", dtype=int, max_tokens=6) + "\n"
    s += "Q: What is the value of pi?\n"
    s += "A: " + sgl.gen("float_res", dtype=float, max_tokens=8) + "\n"
    s += "Q: Is the sky blue?\n"
    s += "A: " + sgl.gen("bool_res", dtype=bool, max_tokens=3) + "\n"


def check_dtype_gen() -> None:
    state = dtype_gen.run(temperature=0)
    assert re.fullmatch(REGEX_STR, state["str_res"]), state["str_res"]
    assert isinstance(json.loads(state["str_res"]), str)
    int(state["int_res"])
    float(state["float_res"])
    assert state["bool_res"] in ("True", "False")


# ---------------------------------------------------------------------------------------------
# a generated variable reused in a later prompt


@sgl.function
def expert_answer(s, question):
    s += "Question: " + question + "\n"
    s += "A good person to answer this question is" + sgl.gen("expert", stop=[".", "\n"], max_tokens=12) + ".\n"
    s += "For instance," + s["expert"] + " would answer that " + sgl.gen("answer", stop=".", max_tokens=12) + "."


def check_reuse_variable() -> None:
    state = expert_answer.run(question="What is the capital of France?", temperature=0)
    expert = state["expert"]
    assert expert.strip() and "\n" not in expert
    expected = (
        "Question: What is the capital of France?\n"
        f"A good person to answer this question is{expert}.\n"
        f"For instance,{expert} would answer that {state['answer']}."
    )
    assert state.text() == expected


# ---------------------------------------------------------------------------------------------
# tool use: the model writes an expression up to a stop string, Python evaluates it


_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def calculate(expression: str) -> str:
    """The calculator tool: evaluates +, -, *, / over numbers (nothing else), as text."""

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"not an arithmetic expression: {expression!r}")

    return str(value(ast.parse(expression.strip(), mode="eval").body))


@sgl.function
def tool_use(s, lhs, rhs):
    s += "Please perform computations using a calculator. You can use calculate(expression) to get the results.\n"
    s += "For example,\ncalculate(1+2)=3\ncalculate(3*4)=12\n"
    s += "Question: What is the product of " + str(lhs) + " and " + str(rhs) + "?\n"
    s += "Answer: The answer is calculate(" + sgl.gen("expression", stop=")", max_tokens=16) + ") = "
    with s.var_scope("answer"):
        s += calculate(s["expression"])


def check_tool_use() -> None:
    lhs, rhs = 257, 983
    state = tool_use.run(lhs=lhs, rhs=rhs, temperature=0)
    assert ")" not in state["expression"]  # the stop string ended the expression
    assert state["answer"] == str(lhs * rhs), state.text()
    assert state.text().endswith(f"calculate({state['expression']}) = {lhs * rhs}")


# ---------------------------------------------------------------------------------------------
# ReAct: a bounded thought / action / observation loop


REACT_EXAMPLE = """Question: Which country does the founder of Microsoft live in?
Thought 1: I need to search for the founder of Microsoft.
Action 1: Search [Founder of Microsoft].
Observation 1: The founder of Microsoft is Bill Gates.
Thought 2: I need to search for the country where Bill Gates lives in.
Action 2: Search [Where does Bill Gates live].
Observation 2: Bill Gates lives in the United States.
Thought 3: The answer is the United States.
Action 3: Finish [United States].

"""


@sgl.function
def react(s, question, max_steps=3):
    s += REACT_EXAMPLE
    s += "Question: " + question + "\n"
    for i in range(1, max_steps + 1):
        s += f"Thought {i}:" + sgl.gen(f"thought_{i}", stop=[".", "\n"], max_tokens=16) + ".\n"
        s += f"Action {i}: " + sgl.select(f"action_{i}", ["Search", "Finish"])
        if s[f"action_{i}"] == "Search":
            s += " [" + sgl.gen(f"query_{i}", stop="]", max_tokens=12) + "].\n"
            s += f"Observation {i}:" + sgl.gen(f"observation_{i}", stop=[".", "\n"], max_tokens=16) + ".\n"
        else:
            s += " [" + sgl.gen("answer", stop="]", max_tokens=12) + "].\n"
            break


def check_react() -> None:
    max_steps = 3
    state = react.run(question="What country does the creator of Linux live in?", max_steps=max_steps, temperature=0)
    transcript = state.text()[len(REACT_EXAMPLE) :]
    actions = [state[f"action_{i}"] for i in range(1, max_steps + 1) if f"action_{i}" in state]
    assert 1 <= len(actions) <= max_steps
    assert all(a in ("Search", "Finish") for a in actions)
    assert "Finish" not in actions[:-1]  # the loop stops at the first Finish
    for i, action in enumerate(actions, start=1):
        assert f"\nThought {i}:{state[f'thought_{i}']}.\nAction {i}: {action} [" in transcript
        if action == "Search":
            assert f"\nObservation {i}:{state[f'observation_{i}']}.\n" in transcript
    # The model finishes within the bound (greedy: at step 2) with a bracketed answer.
    assert actions[-1] == "Finish", transcript
    assert transcript.endswith(f"Finish [{state['answer']}].\n")
    assert "]" not in state["answer"] and state["answer"].strip()


# ---------------------------------------------------------------------------------------------
# parallel decoding: fork / join


@sgl.function
def parallel_decoding(s, topic, fork_size=3):
    s += "Act as a helpful assistant.\n"
    s += "USER: Give some tips for " + topic + ".\n"
    s += "ASSISTANT: Okay. Here are " + str(fork_size) + " concise tips, each under 8 words:\n"
    for i in range(1, 1 + fork_size):
        s += f"{i}." + sgl.gen(f"tip_{i}", max_tokens=12, stop=[".", "\n"]) + ".\n"
    forks = s.fork(fork_size)
    for i in range(fork_size):
        forks[i] += f"Now, I expand tip {i + 1} into a detailed paragraph:\nTip {i + 1}:"
        forks[i] += sgl.gen("detailed_tip", max_tokens=12, stop=["\n\n"])
    forks.join()
    s += "Here are these tips with detailed explanation:\n"
    for i in range(fork_size):
        s += f"Tip {i + 1}:" + forks[i]["detailed_tip"] + "\n"
    s += "\nIn summary," + sgl.gen("summary", max_tokens=12)


def check_parallel_decoding() -> None:
    fork_size = 3
    state = parallel_decoding.run(topic="writing a good blog post", fork_size=fork_size, temperature=0)
    tips = state["detailed_tip"]  # join() gathered each fork's variable, in fork order
    assert isinstance(tips, list) and len(tips) == fork_size
    assert all(isinstance(tip, str) and tip for tip in tips)
    text = state.text()
    assert "Now, I expand tip" not in text  # the forks' own text stays in the forks
    listing = "".join(f"Tip {i + 1}:{tip}\n" for i, tip in enumerate(tips))
    assert text.endswith(f"Here are these tips with detailed explanation:\n{listing}\nIn summary,{state['summary']}")


# ---------------------------------------------------------------------------------------------
# parallel encoding: join("concate_and_append")


@sgl.function
def parallel_encoding(s, question, context_0, context_1, context_2):
    s += "USER: I will ask a question based on some statements.\n"
    s += "ASSISTANT: Sure. I will give the answer.\n"
    s += "USER: Please memorize these statements.\n"
    contexts = [context_0, context_1, context_2]
    forks = s.fork(len(contexts))
    forks += lambda i: f"Statement {i}: " + contexts[i] + "\n"
    forks.join(mode="concate_and_append")
    s += "Now, please answer the following question. Do not list options."
    s += "\nQuestion: " + question + "\n"
    s += "ASSISTANT:" + sgl.gen("answer", max_tokens=8, stop="\n")


def check_parallel_encoding() -> None:
    contexts = ["Ethan is the father of Liam.", "Noah is the father of Julian.", "Oliver is the father of Carlos."]
    state = parallel_encoding.run(
        question="Who is the father of Julian?",
        context_0=contexts[0],
        context_1=contexts[1],
        context_2=contexts[2],
        temperature=0,
    )
    # The text result of the join: every fork's new text, in fork order, then the rest.
    expected = (
        "USER: I will ask a question based on some statements.\n"
        "ASSISTANT: Sure. I will give the answer.\n"
        "USER: Please memorize these statements.\n"
        + "".join(f"Statement {i}: {c}\n" for i, c in enumerate(contexts))
        + "Now, please answer the following question. Do not list options.\n"
        "Question: Who is the father of Julian?\n"
        f"ASSISTANT:{state['answer']}"
    )
    assert state.text() == expected
    assert isinstance(state["answer"], str) and "\n" not in state["answer"]


# ---------------------------------------------------------------------------------------------
# streaming


@sgl.function
def stream_qa(s, question):
    s += sgl.system("You are a helpful assistant.")
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer"))


def check_stream() -> None:
    state = stream_qa.run(question="Compute 1 + 1.", stream=True, max_new_tokens=10, temperature=0)
    chunks = list(state.text_iter("answer"))
    assert len(chunks) > 1 and all(chunks), chunks  # incremental, not one final piece
    assert "".join(chunks) == state["answer"]
    assert "2" in state["answer"], state["answer"]

    state = stream_qa.run(question="Compute 1 + 1.", stream=True, max_new_tokens=10, temperature=0)
    seen, growing = "", []
    for chunk in state.text_iter():
        seen += chunk
        growing.append(seen)
    assert len(growing) > 1 and all(len(a) < len(b) for a, b in itertools.pairwise(growing))
    assert seen == state.text()
    assert state["answer"] and state["answer"] in state.text()


# ---------------------------------------------------------------------------------------------
# regex


IP_REGEX = r"((25[0-5]|2[0-4]\d|[01]?\d\d?).){3}(25[0-5]|2[0-4]\d|[01]?\d\d?)"


@sgl.function
def regex_gen(s):
    s += "Q: What is the IP address of the Google DNS servers?\n"
    s += "A: " + sgl.gen("answer", temperature=0, regex=IP_REGEX, max_tokens=24)


def check_regex() -> None:
    state = regex_gen.run()
    assert re.fullmatch(IP_REGEX, state["answer"]), state["answer"]


# ---------------------------------------------------------------------------------------------
# min_tokens


MIN_TOKENS = 8


@sgl.function
def yes_no(s, min_tokens):
    s += sgl.user("Is the sky blue? Answer yes or no.")
    s += sgl.assistant(sgl.gen("answer", min_tokens=min_tokens, max_tokens=12))


def check_min_tokens() -> None:
    free = yes_no.run(min_tokens=0, temperature=0)
    forced = yes_no.run(min_tokens=MIN_TOKENS, temperature=0)
    # Without the floor the model stops early, so the floor is what lengthens the answer.
    assert completion_tokens(free.get_meta_info("answer")) < MIN_TOKENS, free["answer"]
    assert completion_tokens(forced.get_meta_info("answer")) >= MIN_TOKENS, forced["answer"]
    assert forced["answer"].startswith(free["answer"].rstrip("."))


# ---------------------------------------------------------------------------------------------
# API speculative execution


@sgl.function(num_api_spec_tokens=64)
def gen_character_spec(s):
    s += "Construct a character within the following format:\n"
    s += "Name: Steve Jobs.\nBirthday: February 24, 1955.\nJob: Apple CEO.\n"
    s += "\nPlease generate new Name, Birthday and Job.\n"
    s += "Name:" + sgl.gen("name", stop="\n") + "\nBirthday:" + sgl.gen("birthday", stop="\n")
    s += "\nJob:" + sgl.gen("job", stop="\n") + "\n"


@sgl.function
def gen_character_no_spec(s):
    s += "Construct a character within the following format:\n"
    s += "Name: Steve Jobs.\nBirthday: February 24, 1955.\nJob: Apple CEO.\n"
    s += "\nPlease generate new Name, Birthday and Job.\n"
    s += "Name:" + sgl.gen("name", stop="\n") + "\nBirthday:" + sgl.gen("birthday", stop="\n")
    s += "\nJob:" + sgl.gen("job", stop="\n") + "\n"


def check_completion_speculative() -> None:
    token_usage = sgl.global_config.default_backend.token_usage
    token_usage.reset()
    spec = gen_character_spec.run(temperature=0, max_new_tokens=16)
    spec.sync()
    usage_with_spec = token_usage.prompt_tokens

    token_usage.reset()
    no_spec = gen_character_no_spec.run(temperature=0, max_new_tokens=16)
    no_spec.sync()
    usage_with_no_spec = token_usage.prompt_tokens

    # One long call instead of one call per gen: the prompt is sent (and billed) once.
    assert 0 < usage_with_spec < usage_with_no_spec, (usage_with_spec, usage_with_no_spec)
    for name in ("name", "birthday", "job"):
        assert isinstance(spec[name], str) and "\n" not in spec[name]
    assert spec.text().endswith(f"Name:{spec['name']}\nBirthday:{spec['birthday']}\nJob:{spec['job']}\n")


@sgl.function(num_api_spec_tokens=64)
def gen_character_chat_spec(s):
    s += sgl.system("You are a helpful assistant.")
    s += sgl.user("Write a name, a birthday and a job, one per line.")
    s += sgl.assistant("Steve Jobs\nFebruary 24, 1955\nApple CEO")
    s += sgl.user("Now another person, in the same format.")
    s += sgl.assistant(
        sgl.gen("name", stop="\n", max_tokens=16) + "\n" + sgl.gen("birthday", stop="\n") + "\n" + sgl.gen("job")
    )


def check_chat_speculative() -> None:
    """Three gens in one assistant turn: a chat API writes the whole turn in one call."""
    token_usage = sgl.global_config.default_backend.token_usage
    token_usage.reset()
    state = gen_character_chat_spec.run(temperature=0)
    state.sync()
    values = [state[name] for name in ("name", "birthday", "job")]
    assert all(isinstance(v, str) for v in values)
    assert "\n" not in values[0] + values[1]
    assert state.messages()[-1] == {"role": "assistant", "content": "\n".join(values).strip()}
    assert token_usage.prompt_tokens > 0 and token_usage.completion_tokens > 0


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramCase:
    """One row of the suite: a check, the features it needs, and whether it is heavy."""

    name: str
    check: Callable[[], None]
    needs: frozenset[Feature] = frozenset()
    heavy: bool = False
    """Runs only under `-m slow` on every backend but the reference one (`RuntimeEndpoint`)."""


PROGRAMS: list[ProgramCase] = [
    ProgramCase("few_shot_qa", check_few_shot_qa, frozenset({Feature.TEXT_GEN})),
    ProgramCase("multi_turn_chat", check_multi_turn_chat),
    ProgramCase("select", check_select, frozenset({Feature.SCORING})),
    ProgramCase("multiple_choice", check_multiple_choice_accuracy, frozenset({Feature.SCORING}), heavy=True),
    ProgramCase("decode_int", check_decode_int, frozenset({Feature.TEXT_GEN})),
    ProgramCase("decode_json", check_decode_json, frozenset({Feature.TEXT_GEN})),
    ProgramCase("dtype_gen", check_dtype_gen, frozenset({Feature.TEXT_GEN})),
    ProgramCase("reuse_variable", check_reuse_variable, frozenset({Feature.TEXT_GEN})),
    ProgramCase("tool_use", check_tool_use, frozenset({Feature.TEXT_GEN})),
    ProgramCase("react", check_react, frozenset({Feature.TEXT_GEN}), heavy=True),
    ProgramCase("parallel_decoding", check_parallel_decoding, frozenset({Feature.TEXT_GEN}), heavy=True),
    ProgramCase("parallel_encoding", check_parallel_encoding, frozenset({Feature.TEXT_GEN})),
    ProgramCase("stream", check_stream),
    ProgramCase("regex", check_regex, frozenset({Feature.TEXT_GEN})),
    ProgramCase("min_tokens", check_min_tokens, frozenset({Feature.SGLANG_PARAMS})),
    ProgramCase(
        "completion_speculative", check_completion_speculative, frozenset({Feature.TEXT_GEN, Feature.API_SPEC})
    ),
    ProgramCase("chat_speculative", check_chat_speculative, frozenset({Feature.API_SPEC})),
]

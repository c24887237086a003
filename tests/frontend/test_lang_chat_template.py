"""Chat templates: named tables, the llama-2 fold, model-path guesses, and a model's jinja template."""

from __future__ import annotations

import pytest

import sglang as sgl
from sglang.frontend.jinja_template import JinjaChatTemplate
from sglang.frontend.transcript import Transcript

CHATML_WITH_DEFAULT_SYSTEM = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nDefault.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Llama-2 style: the system prompt lives inside the first user turn.
LLAMA2_JINJA = (
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}"
    "{% set msgs = messages[1:] %}{% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}"
    "{% for m in msgs %}{% if m['role'] == 'user' %}"
    "{{ '[INST] ' }}{% if loop.first and sys %}{{ '<<SYS>>\n' + sys + '\n<</SYS>>\n\n' }}{% endif %}"
    "{{ m['content'] + ' [/INST]' }}{% else %}{{ ' ' + m['content'] + ' </s>' }}{% endif %}{% endfor %}"
)


def render(template, turns):
    t = Transcript(template)
    for role, content in turns:
        t.begin_role(role)
        t.fill(content)
        t.end_role(role)
    return t


def test_named_templates():
    chatml = render(sgl.get_chat_template("chatml"), [("user", "hi"), ("assistant", "yo")])
    assert chatml.text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
    llama3 = render(sgl.get_chat_template("llama-3"), [("user", "hi")])
    assert llama3.text == "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
    default = render(sgl.get_chat_template("default"), [("system", "s"), ("user", "u")])
    assert default.text == "SYSTEM:s\nUSER:u\n"
    with pytest.raises(ValueError, match="known"):
        sgl.get_chat_template("nope")


def test_llama2_folds_the_system_prompt_into_the_first_instruction():
    t = render(sgl.get_chat_template("llama-2-chat"), [("system", "S"), ("user", "U"), ("assistant", "A")])
    assert t.text == "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]A </s><s>"


def test_default_system_prompt_is_inserted_once():
    qwen = sgl.get_chat_template("qwen")
    t = render(qwen, [("user", "a"), ("user", "b")])
    assert t.text.count("You are a helpful assistant.") == 1
    assert [m["role"] for m in t.messages] == ["system", "user", "user"]


def test_roles_do_not_nest():
    t = Transcript(sgl.get_chat_template("default"))
    t.begin_role("user")
    with pytest.raises(ValueError, match="inside"):
        t.begin_role("assistant")


def test_template_guess_from_model_path():
    guess = sgl.get_chat_template_by_model_path
    assert guess("meta-llama/Meta-Llama-3.1-8B-Instruct").name == "llama-3-instruct"
    assert guess("Qwen/Qwen2.5-7B-Instruct").name == "qwen"
    assert guess("HuggingFaceTB/SmolLM2-135M-Instruct").name == "chatml"
    assert guess("some/base-model").name == "default"


def test_jinja_template_keeps_what_the_template_does_with_history():
    template = JinjaChatTemplate(CHATML_WITH_DEFAULT_SYSTEM, bos_token="")
    t = render(template, [("user", "hi"), ("assistant", "yo"), ("user", "again")])
    assert t.text == template.render(t.messages)
    assert t.text.startswith("<|im_start|>system\nDefault.<|im_end|>\n<|im_start|>user\nhi")
    assert [m["role"] for m in t.messages] == ["user", "assistant", "user"]  # the template owns the default


def test_jinja_template_folding_system_into_the_first_turn():
    template = JinjaChatTemplate(LLAMA2_JINJA)
    t = render(template, [("system", "S"), ("user", "U"), ("assistant", "A"), ("user", "V")])
    assert t.text == template.render(t.messages) == "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s>[INST] V [/INST]"


def test_jinja_template_errors_name_the_role():
    template = JinjaChatTemplate("{{ raise_exception('no system role') if messages[0]['role'] == 'system' }}")
    with pytest.raises(ValueError, match="'system'"):
        Transcript(template).begin_role("system")

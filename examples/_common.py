"""What the examples share: their command-line options, the cellbox client (from this tree),
and the model that writes the code — a scripted one by default (no model is needed to run the
examples), or any OpenAI-compatible /chat/completions endpoint with --model.

Both kinds answer the same call, chat(messages, tools) -> an assistant message dict, so the
loop around them, and the path from the model's text or tool call to the sandbox, is the same.
"""
import argparse
import json
import os
import sys
import textwrap
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "clients", "python"))  # the client of this tree

DATA = os.path.join(HERE, "data")
SUPERSTORE = os.path.join(DATA, "superstore.csv")


def parse_args(description, argv=None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", default=os.environ.get("CELLBOX_URL"),
                        help="cellboxd (default $CELLBOX_URL, else http://127.0.0.1:8888)")
    parser.add_argument("--token", default=os.environ.get("CELLBOX_TOKEN"),
                        help="its token (default $CELLBOX_TOKEN, else .cellbox/token)")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL"),
                        help="a model name: use a real OpenAI-compatible model instead of the script")
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
                        help="the model's API (default $OPENAI_BASE_URL, else OpenAI)")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"),
                        help="the model's API key (default $OPENAI_API_KEY)")
    parser.add_argument("--output-dir", default=os.path.join(HERE, "output"),
                        help="where charts and results are written (default examples/output)")
    return parser.parse_args(argv)


def cellbox_options(args):
    """The url/token keyword arguments of the cellbox client (None: its own defaults)."""
    return {"url": args.url, "token": args.token}


def make_model(args, script):
    """A real model when --model (or $OPENAI_MODEL) is given, else the script."""
    if args.model:
        return ChatCompletionsModel(args.model, args.base_url, args.api_key)
    return ScriptedModel(script)


class ScriptedModel:
    """Answers with the next step of a script: an assistant message (a dict or plain text), or
    a function of the conversation so far that returns one (to answer from a tool's output,
    as a model would)."""

    name = "script"

    def __init__(self, steps):
        self.steps = list(steps)

    def chat(self, messages, tools=None):
        if not self.steps:
            raise RuntimeError("the script has no more steps")
        step = self.steps.pop(0)
        if callable(step):
            step = step(messages)
        if isinstance(step, str):
            step = {"content": step}
        return {"role": "assistant", "content": None, **step}


class ChatCompletionsModel:
    """POST {base_url}/chat/completions with urllib: any OpenAI-compatible server (OpenAI,
    vLLM, Ollama, LM Studio, DashScope, ...)."""

    def __init__(self, model, base_url, api_key=None, temperature=0.1, timeout=120):
        self.name = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = api_key
        self.temperature = temperature
        self.timeout = timeout

    def chat(self, messages, tools=None):
        body = {"model": self.name, "messages": messages, "temperature": self.temperature}
        if tools:
            body["tools"] = tools
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as e:
            raise SystemExit(f"{self.url} answered {e.code}: {e.read().decode(errors='replace')[:500]}")
        message = answer["choices"][0]["message"]
        reply = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            reply["tool_calls"] = message["tool_calls"]
        return reply


def show(who, text, width=100):
    """Print one turn of the conversation, indented."""
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    print(f"--- {who}")
    for line in (text or "").splitlines() or [""]:
        print(textwrap.indent(line if len(line) <= 4 * width else line[:4 * width] + " ...", "    "))
    sys.stdout.flush()


def tool_calls_loop(model, messages, tools, run_tool, max_turns=12):
    """The function-calling loop: ask the model; run each tool call it makes (run_tool(call) ->
    the tool message) and ask again; return its first answer without tool calls."""
    for _ in range(max_turns):
        reply = model.chat(messages, tools)
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if reply.get("content"):
            show(f"assistant ({model.name})", reply["content"])
        for call in calls:
            arguments = call["function"]["arguments"]
            try:
                code = json.loads(arguments).get("code", arguments)
            except ValueError:
                code = arguments
            show(f"tool call {call['function']['name']} ({model.name})", code)
            answer = run_tool(call)
            messages.append(answer)
            show("tool result (cellbox)", answer["content"])
        if not calls:
            return reply.get("content") or ""
    raise SystemExit(f"no final answer after {max_turns} turns")


def tool_call(call_id, name, code):
    """An assistant message with one tool call, as the chat completions API returns it."""
    return {"content": None, "tool_calls": [{"id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": json.dumps({"code": code})}}]}


def last_tool_output(messages):
    for message in reversed(messages):
        if message.get("role") == "tool":
            return message["content"]
    return ""

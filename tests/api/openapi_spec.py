"""docs/openapi.yaml as a checker of live responses, for test_openapi.py.

Spec(soft=False) reads the document; given to a V1 client (helpers/v1.py) it checks every
response against the schema the document declares for its path, method, status and content type,
and every NDJSON line against the stream's line schema; what was exercised is recorded in
spec.seen for the coverage check.
"""
import copy
import json
import os
import re
import urllib.parse

import yaml
from jsonschema import Draft202012Validator

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OPENAPI = os.environ.get("CELLBOX_OPENAPI") or os.path.join(REPO, "docs", "openapi.yaml")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


# ---------------------------------------------------------------------------- the document

class Spec:
    """docs/openapi.yaml, with path matching and response validation."""

    def __init__(self, path=OPENAPI, soft=False):
        with open(path) as f:
            self.doc = yaml.safe_load(f)
        # soft: mismatches are collected in .problems (the caller reports them) instead of
        # raised at once, so that one wrong field does not hide the rest of a run
        self.soft = soft
        self.problems = []
        self.seen = set()            # (path template, method, status)
        self.lines_checked = 0
        self.bodies_checked = 0
        self._validators = {}
        self._routes = []
        for template in self.doc.get("paths", {}):
            literal = len([s for s in template.split("/") if s and not s.startswith("{")])
            rx = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
            self._routes.append((literal, template, re.compile(rx)))
        self._routes.sort(key=lambda t: -t[0])

    # -- structure
    def operations(self):
        for template, item in self.doc["paths"].items():
            for method in METHODS:
                if method in item:
                    yield template, method, item[method]

    def resolve(self, ref):
        assert ref.startswith("#/"), f"only local $refs are used here: {ref}"
        node = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            assert isinstance(node, dict) and part in node, f"$ref {ref} does not resolve (at {part!r})"
            node = node[part]
        return node

    def deref(self, node):
        seen = 0
        while isinstance(node, dict) and "$ref" in node and seen < 20:
            node = self.resolve(node["$ref"])
            seen += 1
        return node

    def all_refs(self):
        found = []

        def walk(o, where):
            if isinstance(o, dict):
                for k, v in o.items():
                    if k == "$ref" and isinstance(v, str):
                        found.append((where, v))
                    else:
                        walk(v, f"{where}/{k}")
            elif isinstance(o, list):
                for i, v in enumerate(o):
                    walk(v, f"{where}[{i}]")

        walk(self.doc, "#")
        return found

    # -- matching
    def match(self, path):
        for _, template, rx in self._routes:
            if rx.match(path):
                return template
        return None

    def validator(self, schema):
        key = json.dumps(schema, sort_keys=True)
        v = self._validators.get(key)
        if v is None:
            # The schema is checked as the root of a document that also holds the components,
            # so "#/components/schemas/..." resolves (with any jsonschema version).
            root = dict(copy.deepcopy(schema))
            root["components"] = self.doc["components"]
            v = self._validators[key] = Draft202012Validator(root)
        return v

    def fail(self, message):
        if self.soft:
            self.problems.append(message)
        else:
            raise AssertionError(message)

    def check(self, instance, schema, what):
        errors = sorted(self.validator(schema).iter_errors(instance), key=lambda e: list(e.path))
        if errors:
            detail = "\n".join(f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}"
                               for e in errors[:8])
            self.fail(f"{what} does not match docs/openapi.yaml:\n{detail}\n"
                      f"instance: {json.dumps(instance)[:1000]}")
            return False
        return True

    def response_decl(self, method, url_path, status):
        template = self.match(url_path)
        assert template, f"{method.upper()} {url_path}: no path of docs/openapi.yaml matches"
        op = self.doc["paths"][template].get(method.lower())
        assert op is not None, f"{method.upper()} {template} is not in docs/openapi.yaml"
        responses = op.get("responses", {})
        decl = responses.get(str(status)) or responses.get(f"{str(status)[0]}XX") or responses.get("default")
        assert decl is not None, (f"{method.upper()} {template} answered {status}, which docs/openapi.yaml "
                                  f"does not declare (declared: {sorted(responses)})")
        return template, self.deref(decl)

    def check_response(self, r, streamed):
        """Check one response (its body unless `streamed`); record it as exercised."""
        method = r.request.method.lower()
        url_path = urllib.parse.urlsplit(r.url).path
        try:
            template, decl = self.response_decl(method, url_path, r.status_code)
        except AssertionError as e:
            self.fail(f"{e} (body: {r.text[:300] if not streamed else '...'})")
            return None
        self.seen.add((template, method, r.status_code))
        ctype = r.headers.get("Content-Type", "").split(";")[0].strip()
        content = decl.get("content") or {}
        what = f"{method.upper()} {url_path} -> {r.status_code}"
        if not content:
            if r.content:
                self.fail(f"{what}: no body is declared, got {r.content[:200]!r}")
            return template
        if ctype not in content:
            self.fail(f"{what}: Content-Type {ctype!r}, declared {sorted(content)}")
            return template
        schema = content[ctype].get("schema")
        if ctype == "application/json" and schema is not None:
            self.check(r.json(), schema, what)
            self.bodies_checked += 1
        return template

    def line_schema(self, method, url_path, status):
        _, decl = self.response_decl(method, url_path, status)
        return (decl.get("content") or {})["application/x-ndjson"]["schema"]

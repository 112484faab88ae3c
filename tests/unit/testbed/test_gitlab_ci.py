""".gitlab-ci.yml runs the README's test command: one job whose script runs `bash .ci/run` within a 90-minute
timeout (a cold run took 52 minutes on 2 cores), with the test-bed's cache where GitLab can keep it (inside the
project, git-ignored) and the acceptance results as its JUnit report, found where roles/verify writes them.

GitLab is not run here; what is checked is what GitLab reads: the YAML, its one job, the paths and the duration."""

import fnmatch
import re
import subprocess

import pytest
import yaml

from tests import ROOT

CI_FILE = ROOT / ".gitlab-ci.yml"
COMMAND = "bash .ci/run"
LIMIT_MINUTES = 90
#: Top-level keys of .gitlab-ci.yml that are not jobs (GitLab's "global keywords" and its defaults).
GLOBAL_KEYWORDS = {
    "default",
    "include",
    "stages",
    "variables",
    "workflow",
    "image",
    "services",
    "cache",
    "before_script",
    "after_script",
    "spec",
}
#: GitLab's duration units (its timeout takes e.g. `90 minutes`, `1h 30m`, `1 hour 30 minutes`, a bare number of
#: seconds), in minutes.
UNITS = {"s": 1 / 60, "sec": 1 / 60, "second": 1 / 60, "m": 1, "min": 1, "minute": 1, "h": 60, "hr": 60, "hour": 60}
UNITS |= {"d": 24 * 60, "day": 24 * 60}


class _GitLabLoader(yaml.SafeLoader):
    """YAML as GitLab reads it: `!reference [job, key]` is a list of names."""


_GitLabLoader.add_constructor("!reference", lambda loader, node: loader.construct_sequence(node))


def ci() -> dict:
    loaded = yaml.load(CI_FILE.read_text(), Loader=_GitLabLoader)  # a SafeLoader
    assert isinstance(loaded, dict), f"{CI_FILE.name} should be a mapping of jobs and keywords"
    return loaded


def jobs() -> dict[str, dict]:
    """The jobs: top-level keys that are no global keyword and not hidden (`.name` templates)."""
    return {k: v for k, v in ci().items() if k not in GLOBAL_KEYWORDS and not k.startswith(".")}


def the_job() -> dict:
    (job,) = jobs().values()
    return job


def minutes(duration: str | int) -> float:
    """A GitLab duration in minutes: a bare number of seconds, or numbers each with its unit."""
    text = str(duration).strip().lower()
    if text.isdigit():
        return int(text) / 60
    assert re.fullmatch(r"(\s*\d+(\.\d+)?\s*[a-z]+)+\s*", text), f"bad duration {text!r}"
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text):
        name = unit if unit in UNITS else unit.removesuffix("s")
        assert name in UNITS, f"unknown unit {unit!r} in {text!r}"
        total += float(number) * UNITS[name]
    return total


def test_the_ci_file_is_yaml_with_one_job():
    """One stage, one job, in that stage."""
    found = jobs()
    assert len(found) == 1, f"{CI_FILE.name} should have one job, has {sorted(found)}"
    stages = ci().get("stages", ["test"])
    assert len(stages) == 1 and the_job().get("stage", "test") == stages[0]


def test_the_job_runs_the_readme_test_command():
    """The script runs `bash .ci/run`, the README's test command (`make test` from a clean clone)."""
    script = the_job()["script"]
    script = [script] if isinstance(script, str) else script
    assert COMMAND in [line.strip() for line in script], f"the job's script {script} does not run {COMMAND!r}"
    assert (ROOT / ".ci" / "run").is_file()


def test_the_job_times_out_within_90_minutes():
    """A hung run stops within the limit; a cold run takes about 52 minutes, so the limit is not below that."""
    limit = minutes(the_job()["timeout"])
    assert 52 < limit <= LIMIT_MINUTES, f"the job's timeout is {limit:g} minutes, expected at most {LIMIT_MINUTES}"


@pytest.mark.parametrize(
    ("duration", "expected"),
    [("90 minutes", 90), ("1h 30m", 90), ("1 hour 30 minutes", 90), ("5400", 90), ("2h", 120), ("91m", 91)],
)
def test_durations_read_as_gitlab_reads_them(duration, expected):
    """minutes() is what the timeout check relies on: GitLab's forms, each to its number of minutes."""
    assert minutes(duration) == expected


@pytest.mark.parametrize(("duration", "refusal"), [("1 fortnight", "unknown unit"), ("ninety minutes", "bad duration")])
def test_a_duration_gitlab_would_not_read_is_refused(duration, refusal):
    """A unit or a number that is not GitLab's is refused rather than read as nothing."""
    with pytest.raises(AssertionError, match=refusal):
        minutes(duration)


def test_the_cache_is_inside_the_project_and_ignored_by_git():
    """GitLab caches only paths inside the project: GPU_TESTBED_CACHE points there, the job caches that path, and
    git ignores it (so lint, tests and a clean checkout never see it)."""
    job = the_job()
    cache_dir = {**ci().get("variables", {}), **job.get("variables", {})}["GPU_TESTBED_CACHE"]
    assert cache_dir.startswith("$CI_PROJECT_DIR/"), f"GPU_TESTBED_CACHE {cache_dir!r} is outside the project"
    relative = cache_dir.removeprefix("$CI_PROJECT_DIR/").rstrip("/")
    cached = [p.rstrip("/") for p in job["cache"]["paths"]]
    assert relative in cached, f"the job caches {cached}, not GPU_TESTBED_CACHE ({relative})"
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", f"{relative}/bin/helm"], check=False
    )
    assert ignored.returncode == 0, f"git does not ignore {relative}/ (.gitignore)"


def test_the_junit_report_is_where_the_verify_role_writes_it():
    """roles/verify writes pytest's JUnit XML to {{ testbed_facts_state_dir }}/acceptance.xml, and roles/testbed_facts
    puts that folder at <cache>/state/<cluster>: the job's report and artifacts match that path."""
    verify = (ROOT / "roles" / "verify" / "tasks" / "main.yml").read_text()
    assert "--junitxml={{ testbed_facts_state_dir }}/acceptance.xml" in verify
    facts = (ROOT / "roles" / "testbed_facts" / "tasks" / "main.yml").read_text()
    assert 'testbed_facts_state_dir: "{{ testbed_facts_cache_dir }}/state/{{ testbed_cluster_name }}"' in facts
    job = the_job()
    cache = job["variables"]["GPU_TESTBED_CACHE"].removeprefix("$CI_PROJECT_DIR/").rstrip("/")
    cluster = yaml.safe_load((ROOT / "inventory" / "localhost" / "group_vars" / "all.yml").read_text())[
        "testbed_cluster_name"
    ]
    written = f"{cache}/state/{cluster}/acceptance.xml"
    junit = job["artifacts"]["reports"]["junit"]
    assert fnmatch.fnmatch(written, junit), f"the JUnit report {junit!r} does not match {written}"
    assert junit in job["artifacts"]["paths"] and job["artifacts"]["when"] == "always"
    assert "build/*.log" in job["artifacts"]["paths"]

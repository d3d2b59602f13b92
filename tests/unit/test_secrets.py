"""Redaction: every credential form a URI, a message or a job's overrides carries is masked, and nothing else is."""

from __future__ import annotations

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from runner.secrets import one_line, redact, redact_tree


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("http://alice:s3cret@host:5000", "http://alice:***@host:5000", id="user-password"),
        pytest.param("https://ghp_token123@github.example/x", "https://***@github.example/x", id="bare-token"),
        pytest.param("https://h/x?token=abc123&part=1", "https://h/x?token=***&part=1", id="query-token-first"),
        pytest.param("https://h/x?part=1&token=abc123", "https://h/x?part=1&token=***", id="query-token-last"),
        pytest.param(
            "https://bucket/x?X-Amz-Signature=abc123&part=1", "https://bucket/x?X-Amz-Signature=***&part=1", id="sig"
        ),
        pytest.param("api_key=k1 apikey=k2", "api_key=*** apikey=***", id="api-key"),
        pytest.param("token: abc", "token: ***", id="yaml-token"),
        pytest.param("MLFLOW_TRACKING_TOKEN=abc", "MLFLOW_TRACKING_TOKEN=***", id="env-token"),
        pytest.param("--token abc --verbose", "--token *** --verbose", id="flag-then-value"),
        pytest.param("--O1 --password=s3cret", "--O1 --password=***", id="flag-equals-value"),
        pytest.param("got {'token': 'abc', 'n': 1}", "got {'token': '***', 'n': 1}", id="dict-in-a-message"),
        pytest.param('{"password": "s3cret"}', '{"password": "***"}', id="json"),
        pytest.param(
            "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sig=abc%2Bdef&se=x",
            "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sig=***&se=x",
            id="azure-sas-sig",
        ),
        pytest.param("https://h/api?auth=abc123&page=2", "https://h/api?auth=***&page=2", id="query-auth"),
        pytest.param("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI", "AWS_SECRET_ACCESS_KEY=***", id="aws-secret-access-key"),
        pytest.param("Authorization: Bearer eyJhbGci.eyJzdWIi-x_y", "Authorization: Bearer ***", id="bearer-header"),
        pytest.param(
            "https://h/api?authorization=Bearer%20abc123&page=2",
            "https://h/api?authorization=Bearer%20***&page=2",
            id="bearer-in-a-uri",
        ),
        pytest.param("authorization=Bearer abc123", "authorization=Bearer ***", id="bearer-assigned"),
        pytest.param('{"Authorization": "Basic dXNlcjpwYXNz"}', '{"Authorization": "Basic ***"}', id="basic-in-json"),
        pytest.param("401 for Bearer abc.def/ghi== at h", "401 for Bearer *** at h", id="bearer-in-a-message"),
        pytest.param(
            "+header=Authorization\\:\\ Bearer\\ abc",
            "+header=Authorization\\:\\ Bearer\\ ***",
            id="bearer-hydra-escaped",
        ),
        pytest.param(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9v+YmFy/==;EndpointSuffix=core.windows.net",
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=***;EndpointSuffix=core.windows.net",
            id="azure-account-key",
        ),
        pytest.param("https://h/v1?key=AIzaSyA1&alt=json", "https://h/v1?key=***&alt=json", id="query-key-first"),
        pytest.param("https://h/v1?alt=json&key=AIzaSyA1", "https://h/v1?alt=json&key=***", id="query-key-last"),
        pytest.param("https\\://h/v1?key\\=AIzaSyA1", "https\\://h/v1?key\\=***", id="query-key-hydra-escaped"),
        pytest.param(
            "postgresql://alice:p@ss@db.example:5432/runs",
            "postgresql://alice:***@db.example:5432/runs",
            id="at-in-password",
        ),
        pytest.param("http://alice:a@b:c@d@host", "http://alice:***@host", id="several-at-in-password"),
        pytest.param(
            "tracking.uri=http\\://alice\\:p@ss@h/x", "tracking.uri=http\\://alice\\:***@h/x", id="at-hydra-escaped"
        ),
    ],
)
def test_credentials_are_masked(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("sqlite:///mlflow.db", id="sqlite-uri"),
        pytest.param("hydra.sweep.dir=/tmp/a@b author: me", id="at-in-a-path-and-author"),
        pytest.param("max_tokens=128 tokens: 5", id="names-that-only-contain-a-secret-word"),
        pytest.param("--no-auth --verbose", id="a-flag-without-a-value"),
        pytest.param("token expired, mail admin@example.com", id="prose"),
        pytest.param("measure.warmup_s=0.1 workload.hidden=4096", id="config-values"),
        pytest.param("override any key with key=value; sort_key=name monkey=3", id="key-outside-a-query"),
        pytest.param("http://host:5000/runs/a@b", id="at-in-a-uri-path"),
    ],
)
def test_text_without_credentials_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_a_sweeps_job_overrides_are_masked_as_hydra_writes_them() -> None:
    # Hydra's grammar takes ':' and '=' in an unquoted value escaped, and its sweeper hands each job them so
    typed = ["tracking.uri=https\\://alice\\:s3cret@h/x?token\\=abc", "+workload=a,b"]
    (batch,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(typed), None)
    assert [redact(override) for override in batch[0]] == [
        "tracking.uri=https\\://alice\\:***@h/x?token\\=***",
        "+workload=a",
    ]


def test_errors_and_config_trees_are_masked() -> None:
    error = ConnectionError("cannot reach https://h/api?token=abc\nretried 3 times")
    assert one_line(error) == "ConnectionError: cannot reach https://h/api?token=***"
    tree = {"tracking": {"uri": "http://alice:s3cret@host"}, "runs": ["--password s3cret", 3]}
    assert redact_tree(tree) == {"tracking": {"uri": "http://alice:***@host"}, "runs": ["--password ***", 3]}

"""The serving benchmark's plumbing: its statistics, targets and server handling on stub servers (fast),
and one smoke run end to end on a tiny model (slow; its timings mean nothing)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys

import pytest

pytest.importorskip("httpx")
from benchmarks import bench_serve as bench  # noqa: E402

# A stand-in server: prints its URL as albertlm serve does, answers GET with 200 and POST /predict with
# 200, 429 for every third request and, for every fifth, closes the connection without an answer.
# "stubborn" ignores SIGTERM.
STUB = r"""
import http.server, itertools, signal, sys
count = itertools.count(1)
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    def do_GET(self):
        self.answer(200)
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        n = next(count)
        if n % 5 == 0:
            self.close_connection = True
            return
        self.answer(429 if n % 3 == 0 else 200)
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"stub on http://127.0.0.1:{server.server_port}", file=sys.stderr, flush=True)
server.serve_forever()
"""


def _stub(tmp_path, kind: str = "polite", grace_s: float = 30):
    return bench.ServerProcess(kind, [sys.executable, "-c", STUB, kind], dict(os.environ), tmp_path, grace_s=grace_s)


def test_percentile_interpolates_between_ranks():
    assert bench.percentile([], 50) is None
    assert bench.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert bench.percentile([4.0, 1.0, 3.0, 2.0], 0) == 1.0 and bench.percentile([4.0, 1.0, 3.0, 2.0], 100) == 4.0
    assert bench.percentile([float(i) for i in range(1, 101)], 99) == pytest.approx(99.01)


def test_summarize_rates_and_latency_from_the_200s_and_counts_every_other_answer():
    records = [(0.010, 200), (0.020, 200), (0.500, 429), (1.0, "timeout"), (0.030, 200), (0.2, "connection"),
               (0.1, 500)]
    row = bench.summarize(records, wall_s=2.0, per_request=2)
    assert row["requests"] == 7 and row["ok"] == 3
    assert row["errors"] == {"429": 1, "500": 1, "connection": 1, "timeout": 1}
    assert row["requests_per_s"] == 1.5 and row["sentences_per_s"] == 3.0
    assert row["p50_ms"] == 20.0 and row["max_ms"] == 30.0
    assert bench.summarize([(1.0, "timeout")], 1.0, 1)["p99_ms"] is None


def test_request_bodies_single_strings_or_lists():
    assert bench.request_bodies(["a b", "c"], 1) == [b'{"inputs": "a b"}', b'{"inputs": "c"}']
    assert [json.loads(b) for b in bench.request_bodies(["a", "b", "c", "d", "e"], 2)] == [
        {"inputs": ["a", "b"]}, {"inputs": ["c", "d"]}]


def _result(**changes) -> dict:
    run = lambda rps, p50, p99: {"requests_per_s": rps, "p50_ms": p50, "p99_ms": p99}
    result = {"servers": {"int8+ee": {"runs": {"1": run(100, 5.0, 9.0), "32": run(900, 30.0, 60.0)}},
                          "fp32": {"runs": {"1": run(50, 12.0, 20.0)}},
                          "baseline": {"runs": {"1": run(40, 20.0, 10.0), "32": run(150, 200.0, 400.0)}}},
              "in_process": {"int8+ee": {"p50_ms": 4.8}, "fp32": {"p50_ms": 10.0}},
              "overload": {"crashes": 0, "other_than_200_or_429": 3}, "memory": {"end_over_start": 1.02}}
    result.update(changes)
    return result


def test_targets_measure_each_goal_and_leave_the_unmeasured_at_none():
    got = {t.name: t.as_dict() for t in bench.targets(_result())}
    assert len(got) == 8
    rate = got["serve int8 + early exit at concurrency 32: requests/s over the baseline's"]
    assert (rate["measured"], rate["met"]) == (6.0, True)
    p99 = got["serve int8 + early exit at concurrency 1: p99 over the baseline's p99"]
    assert (p99["measured"], p99["met"]) == (0.9, True)
    assert got["serve fp32 at concurrency 1: p50 over in-process batch-1 predict p50"]["measured"] == 1.2
    assert got["serve fp32 at concurrency 1: p50 over in-process batch-1 predict p50"]["met"] is False
    assert got["serve int8 at concurrency 1: p50 over in-process batch-1 predict p50"]["met"] is None  # not run
    assert got["overload: server crashes"]["met"] is True
    assert got["overload: answers other than 200 or 429 (timeouts and connection errors included)"]["met"] is False
    assert got["memory: server RSS at the end of the long run over its start"]["met"] is True
    bare = [t.as_dict() for t in bench.targets(_result(servers={}, overload=None, memory=None))]
    assert [t["measured"] for t in bare if t["target"].startswith(("serve int8 + early exit at concurrency 32",
                                                                    "overload", "memory"))] == [None] * 4


def test_load_run_counts_200s_429s_and_dropped_connections(tmp_path):
    args = bench.parse_args(["--requests", "30", "--max-seconds", "30", "--timeout", "10"])
    with _stub(tmp_path) as server:
        server.wait_ready()
        row = bench.load_run(server, [b'{"inputs": "x"}'], 4, args, warmup=0)
    assert row["requests"] == 30 and row["ok"] + sum(row["errors"].values()) == 30
    assert set(row["errors"]) == {"429", "connection (RemoteProtocolError)"}  # the stub closes every fifth unanswered
    assert row["ok"] > 0 and row["peak_rss_mb"] > 0 and row["server_cpu_ms_per_request"] >= 0
    assert server.exit_status == -15  # stopped by SIGTERM on leaving the block


def test_a_server_is_stopped_on_an_error_and_killed_when_it_ignores_sigterm(tmp_path):
    with pytest.raises(KeyboardInterrupt), _stub(tmp_path, "stubborn", grace_s=0.5) as server:
        server.wait_ready()
        raise KeyboardInterrupt
    assert server.proc.poll() == -9 and server.exit_status == -9
    failing = bench.ServerProcess("failing", [sys.executable, "-c", "import sys; print('no model', file=sys.stderr); "
                                  "sys.exit(2)"], dict(os.environ), tmp_path)
    with pytest.raises(RuntimeError, match=r"failing did not start \(exit status 2\): no model"), failing:
        failing.wait_ready()


def test_a_directory_that_is_not_a_sequence_classifier_is_a_one_line_error(tmp_path, capsys):
    from albertlm import AlbertForPreTraining, get_preset

    AlbertForPreTraining(get_preset("test")).save_pretrained(tmp_path / "pre")
    assert bench.main(["--model", str(tmp_path / "pre"), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"bench_serve: --model {tmp_path / 'pre'}: holds an AlbertForPreTraining")
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_smoke_run_writes_every_field_and_target(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    pytest.importorskip("prometheus_client")
    baseline = importlib.util.find_spec("transformers") is not None
    out = tmp_path / "serve.json"
    assert bench.main(["--concurrency", "1", "4", "--requests", "20", "--max-seconds", "20", "--sentences", "50",
                       "--inprocess-calls", "10", "--memory-requests", "40", "--memory-concurrency", "4",
                       "--overload-clients", "16", "--overload-queue", "2", "--overload-requests", "48",
                       "--out", str(out), *([] if baseline else ["--no-baseline"])]) == 0
    envelope = json.loads(out.read_text())
    assert {"date", "command", "machine", "wall_s", "json", "targets", "results"} == set(envelope)
    result = envelope["results"]
    assert {"settings", "in_process", "servers", "memory", "overload", "notes"} <= set(result)
    expected = {"fp32", "int8", "int8+ee"} | ({"baseline"} if baseline else set())
    assert set(result["servers"]) == expected and set(result["in_process"]) == {"fp32", "int8", "int8+ee"}
    for name, server in result["servers"].items():
        # each stopped by SIGTERM after a clean shutdown; uvicorn.run re-raises the signal at its end (the
        # baseline), albertlm serve returns 0
        assert server["exit_status"] == (-signal.SIGTERM if name == "baseline" else 0), name
        assert set(server["runs"]) == {"1", "4"}
        for row in server["runs"].values():
            assert row["requests"] == 20 and row["ok"] == 20 and row["errors"] == {}, (name, row)
            assert row["p50_ms"] <= row["p99_ms"] and row["peak_rss_mb"] > 0
            assert {"requests_per_s", "sentences_per_s", "client_cpu_ms_per_request", "server_cpu_ms_per_request",
                    "other_load_cores"} <= set(row)
    assert result["servers"]["int8+ee"]["early_exit"]["patience"] == 2
    overload = result["overload"]
    assert overload["crashes"] == 0 and overload["other_than_200_or_429"] == 0 and overload["exit_status"] == 0
    assert sum(overload["answers"].values()) == overload["requests"] == 48
    memory = result["memory"]
    assert memory["requests"] == 40 and memory["rss_mb_start"] > 0 and memory["end_over_start"] > 0
    assert len(envelope["targets"]) == 8
    measured = {t["target"] for t in envelope["targets"] if t["measured"] is not None}
    assert {"overload: server crashes", "memory: server RSS at the end of the long run over its start"} <= measured
    assert "| serve int8 + early exit | 4 |" in bench.markdown(envelope)

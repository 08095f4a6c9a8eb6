"""`albertlm serve` as a real server process on a loopback port, talked to over HTTP.

Three tiny fine-tuned directories (a classifier with exit heads, a regressor, an NER tagger), one server
process each, plus one for the full queue and SIGTERM; all start at once in a module fixture. The
equality servers get a token cap equal to the concurrent requests' total and a long wait, so the
requests merge into exactly one batch because they fill it, not because of a timer.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402  (after the skips)

from albertlm import AlbertConfig, AlbertForPreTraining
from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.serve.predictor import SPECIAL_TOKENS, ServedModel
from albertlm.serve.settings import ServeSettings
from albertlm.tasks.registry import FAMILIES
from albertlm.tokenizer import Tokenizer, train_tokenizer
from albertlm.inference.load import load_tokenizer
from albertlm.train.finetune import FinetuneRecipe, finetune
from albertlm.inference.predict import predict_lines
from test_distill import FILL, NEG, POS, RECIPE, write_sst, write_stsb
from test_finetune import CITIES, PEOPLE, VERBS, write_conll

KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
STARTUP_S = 180  # a loaded 2-core machine imports torch slowly


def _pretrained(path: Path) -> Path:
    """A random tiny ALBERT with large initial weights, so that even a two-step fine-tune answers
    differently for different inputs (a misrouted answer cannot pass for the right one)."""
    r = random.Random(0)
    train_tokenizer([" ".join(r.choices(POS + NEG + FILL + PEOPLE + CITIES + VERBS + ["."], k=12)) for _ in range(500)],
                    path, vocab_size=100, log=lambda msg: None)
    config = AlbertConfig(vocab_size=Tokenizer.load(path).vocab_size, embedding_size=16, hidden_size=32,
                          num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                          max_position_embeddings=128, initializer_range=0.5)
    torch.manual_seed(0)
    AlbertForPreTraining(config).save_pretrained(path)
    return path


def _requests(kind: str) -> list:
    """Twelve /predict bodies' inputs of mixed shapes: a single string, lists of strings and of pairs."""
    r = random.Random(kind)
    if kind == "ner":
        text = lambda: " ".join([r.choice(PEOPLE), r.choice(VERBS), "to", r.choice(CITIES)][:r.randint(1, 4)])
    else:
        text = lambda: " ".join(r.choices(POS + NEG + FILL, k=r.randint(2, 9)))
    out: list = [text()]  # a bare string: answered by one object
    for n in range(11):
        pair = kind != "ner" and n % 3 == 0
        out.append([[text(), text()] if pair and k % 2 == 0 else text() for k in range(1 + n % 4)])
    return out


def _lines(inputs) -> list[str]:
    items = [inputs] if isinstance(inputs, str) else inputs
    return ["\t".join(i) if isinstance(i, list) else i for i in items]


class Server:
    """`python -m albertlm.cli serve DIR --port 0 ...` with its log in files; `url` once it listens."""

    def __init__(self, model_dir: Path, logs: Path, *flags: str):
        self.model_dir, self.err = model_dir, logs.with_suffix(".err")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with open(logs.with_suffix(".out"), "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "albertlm.cli", "serve", str(model_dir), "--port", "0",
                                          "--device", "cpu", *flags], stdout=out, stderr=err, env=env)
        self.url = ""

    def wait_ready(self) -> Server:
        deadline = time.monotonic() + STARTUP_S
        while not self.url:
            found = re.search(r"on (http://127\.0\.0\.1:\d+)", self.err.read_text())
            if found:
                self.url = found.group(1)
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the server did not start (status {self.proc.poll()}): {self.err.read_text()}")
            else:
                time.sleep(0.05)
        while True:  # bound, then uvicorn starts: /health answers once the app is up
            try:
                if httpx.get(self.url + "/health").status_code == 200:
                    return self
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"no /health (status {self.proc.poll()}): {self.err.read_text()}")
                time.sleep(0.05)

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics by name and labels, e.g. `albertlm_requests_total{code=401,route=/info}`."""
        text = httpx.get(self.url + "/metrics", headers=AUTH).text
        return {s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}" if s.labels else ""):
                s.value for family in text_string_to_metric_families(text) for s in family.samples}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("serve")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    pre = _pretrained(root / "pre")
    conll = root / "conll"
    conll.mkdir()
    write_conll(conll, random.Random(0))
    two = dict(steps=2, eval_every=2, **RECIPE)
    dirs = {"cls": root / "cls", "reg": root / "reg", "ner": root / "ner"}
    finetune("sst-2", pre, write_sst(root / "sst", n_train=40, n_dev=10), dirs["cls"],
             FinetuneRecipe(early_exit=True, **two), progress=False)
    finetune("sts-b", pre, write_stsb(root / "stsb"), dirs["reg"], FinetuneRecipe(**two), progress=False)
    finetune("conll2003", pre, conll, dirs["ner"], FinetuneRecipe(**two), progress=False)
    torch.set_num_threads(threads)
    return {**dirs, "pre": pre, "root": root}


def _total_tokens(model_dir: Path, kind: str) -> int:
    tokenizer = load_tokenizer(model_dir)
    return sum(len(tokenizer.encode(line)) + SPECIAL_TOKENS for inputs in _requests(kind) for line in _lines(inputs))


@pytest.fixture(scope="module")
def servers(models) -> dict[str, Server]:
    logs = models["root"]
    batch = lambda kind: ["--max-wait-ms", "60000", "--max-batch-tokens", str(_total_tokens(models[kind], kind))]
    started = {
        "cls": Server(models["cls"], logs / "cls", "--patience", "1", "--api-key", KEY, "--max-inputs", "8",
                      "--max-body-bytes", "4096", *batch("cls")),
        "reg": Server(models["reg"], logs / "reg", *batch("reg")),
        "ner": Server(models["ner"], logs / "ner", "--max-queue", str(len(_requests("ner"))), *batch("ner")),
    }
    try:
        yield {name: s.wait_ready() for name, s in started.items()}
    finally:
        codes = {name: s.stop() for name, s in started.items()}
    assert codes == dict.fromkeys(started, 0), {n: started[n].err.read_text()[-2000:] for n in started}


# ---------------------------------------------------------------------------- answers
@pytest.mark.parametrize("kind", ["cls", "reg", "ner"])
def test_concurrent_clients_get_predicts_answers_from_one_merged_batch(servers, models, kind):
    server = servers[kind]
    bodies = _requests(kind)
    barrier = threading.Barrier(len(bodies))

    def ask(inputs):
        barrier.wait()
        return httpx.post(server.url + "/predict", json={"inputs": inputs}, headers=AUTH, timeout=120)

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        responses = list(pool.map(ask, bodies))
    assert [r.status_code for r in responses] == [200] * len(bodies), responses[0].text
    answers = [r.json() for r in responses]
    assert isinstance(answers[0], dict) and all(isinstance(a, list) for a in answers[1:])
    answers = [answers[0]] + [a for group in answers[1:] for a in group]
    lines = [line for inputs in bodies for line in _lines(inputs)]
    layers: list = []
    expected = predict_lines(models[kind], lines, device="cpu", patience=1 if kind == "cls" else None,
                             exit_layers=layers)
    assert [a["line"] for a in answers] == expected
    assert len(set(expected)) > len(expected) // 2  # the answers differ from input to input
    for a, line, want in zip(answers, lines, expected):
        if kind == "cls":
            assert (a["label"], f"{a['score']:.4f}") == tuple(want.split("\t"))
        elif kind == "reg":
            assert f"{a['score']:.4f}" == want
        else:
            assert [f"{t['word']}/{t['tag']}" for t in a["tokens"]] == want.split()
    if kind == "cls":  # early exit: the layers each input ran, as predict counts them
        assert [a["layers"] for a in answers] == layers
    m = server.metrics()
    assert m["albertlm_batch_requests_count"] == 1 and m["albertlm_batch_requests_sum"] == len(bodies)
    assert m["albertlm_batch_inputs_sum"] == len(lines)
    assert m["albertlm_queue_depth"] == 0
    if kind == "cls":
        assert m["albertlm_early_exit_layers_count"] == len(lines)
        assert m["albertlm_early_exit_layers_sum"] == sum(layers)


def test_info_health_and_metrics(servers, models):
    cls = servers["cls"]
    info = httpx.get(cls.url + "/info", headers=AUTH).json()
    assert info["model_dir"] == str(models["cls"]) and info["task"] == "sst-2"
    assert info["head"] == "AlbertForSequenceClassification" and info["labels"] == ["0", "1"]
    assert info["backend"] == "fp32" and info["early_exit"] == {"patience": 1, "layers": 2}
    assert info["limits"]["max_inputs"] == 8 and info["limits"]["max_body_bytes"] == 4096 and info["api_key"] is True
    assert KEY not in json.dumps(info)
    ner = httpx.get(servers["ner"].url + "/info").json()
    assert ner["family"] == "ner" and "B-PER" in ner["labels"]
    assert httpx.get(cls.url + "/health").json() == {"status": "ok"}
    r = httpx.get(cls.url + "/metrics", headers=AUTH)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert cls.metrics()["albertlm_requests_total{code=200,route=/health}"] >= 1
    assert httpx.post(cls.url + "/predict", json={"inputs": []}, headers=AUTH).json() == []


def test_question_answering_and_multiple_choice_answer_as_predict(models, tmp_path):
    """In-process (the HTTP path is the same for every head): the answer's fields and its line."""
    from test_finetune import write_race, write_squad

    lines = {"squad-v1.1": ["what color is it ?\tthe cat is red and the dog is blue .", "what color is it ?\tblue ."],
             "race": [json.dumps({"article": "a cat sat", "question": "which one is a color ?",
                                  "options": ["red", "cat", "dog", "fish"]}),
                      json.dumps({"context": "", "question": "the color is _ .", "options": ["dog", "blue", "x", "y"]})]}
    for task, write in (("squad-v1.1", write_squad), ("race", write_race)):
        data = tmp_path / task
        data.mkdir()
        write(data, random.Random(0))
        finetune(task, models["pre"], data, tmp_path / f"ft-{task}", FinetuneRecipe(steps=1, **RECIPE), progress=False)
        answers = ServedModel(tmp_path / f"ft-{task}", ServeSettings(device="cpu")).predict(lines[task])
        assert [a["line"] for a in answers] == predict_lines(tmp_path / f"ft-{task}", lines[task], device="cpu")
        for a, line in zip(answers, lines[task]):
            if task == "race":
                assert a["line"] == f"{a['choice']}\t{a['option']}" and a["option"] in json.loads(line)["options"]
            else:
                assert a["line"] == a["answer"] and a["answer"] in line.split("\t")[1]


# ---------------------------------------------------------------------------- refusals
def test_the_api_key_guards_every_route_but_health(servers):
    url = servers["cls"].url
    for route in ("/info", "/metrics", "/nowhere"):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}):
            r = httpx.get(url + route, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (route, headers)
            assert r.json()["error_type"] == "unauthorized" and "Authorization: Bearer" in r.json()["error"]
    assert httpx.post(url + "/predict", json={"inputs": "a good film ."}).status_code == 401
    assert httpx.get(url + "/health").status_code == 200
    assert httpx.get(url + "/info", headers={"authorization": f"bearer {KEY}"}).status_code == 200
    r = httpx.get(url + "/nowhere", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"] == "Not Found"
    assert servers["cls"].metrics()["albertlm_requests_total{code=401,route=other}"] == 4


def _predict(url: str, **kwargs) -> httpx.Response:
    return httpx.post(url + "/predict", headers=AUTH, timeout=60, **kwargs)


@pytest.mark.parametrize("body, message", [
    (b'{"inputs": ["a good film .",', r"^body: not valid JSON: Expecting value \(line 1, column 29\)$"),
    (b'\xff{"inputs": "x"}', r"^body: not valid UTF-8 \(byte 0\)$"),
    (b'["a good film ."]', r'^body: expected a JSON object \{"inputs": \.\.\.\}$'),
    (b'{"text": "a good film ."}', r'^body: expected a JSON object \{"inputs": \.\.\.\}$'),
    (b'{"inputs": "x", "truncate": true}', r"^body: unknown field 'truncate' \(the body takes only inputs\)$"),
    (b'{"inputs": 7}', r"^inputs: expected a string, or a list of strings and pairs of strings$"),
    (b'{"inputs": ["a", "b", 3]}', r"^inputs\[2\]: expected a string or a pair of strings$"),
    (b'{"inputs": [["a", "b", "c"]]}', r"^inputs\[0\]: expected a string or a pair of strings$"),
    (b'{"inputs": [["a", null]]}', r"^inputs\[0\]: expected a string or a pair of strings$"),
    (b'{"inputs": ["a", ["b", "c\\td"]]}', r"^inputs\[1\]\[1\]: a text of a pair must not hold a tab$"),
    (b'{"inputs": ["a", "  "]}', r"^inputs\[1\]: an empty text \(nothing to predict\)$"),
])
def test_malformed_bodies_are_422_naming_the_field(servers, body, message):
    r = _predict(servers["cls"].url, content=body)
    assert r.status_code == 422 and r.json()["error_type"] == "validation"
    assert re.search(message, r.json()["error"]), r.json()


@pytest.mark.filterwarnings("ignore:int8 backend fbgemm")
def test_the_served_model_names_the_input_the_head_cannot_read_and_runs_int8(models):
    """In-process: a family's own parse error (QA needs question<TAB>context) names `inputs[i]`, not a
    file line; --int8 serves the int8 copy."""
    qa = ServedModel(models["cls"], ServeSettings())
    qa.family = FAMILIES["qa"]
    with pytest.raises(AlbertlmError, match=r"^inputs\[3\]: expected question<TAB>context or JSON"):
        qa.example(3, "no tab here")
    int8 = ServedModel(models["cls"], ServeSettings(int8=True, device="auto"))
    assert int8.backend == "int8 (fbgemm)" and int8.describe()["device"] == "cpu"
    assert [a["label"] in ("0", "1") for a in int8.predict(["a good film .", "a bad film ."])] == [True, True]


def test_too_large_bodies_and_too_many_inputs_are_413(servers):
    url = servers["cls"].url
    r = _predict(url, json={"inputs": ["a good film ."] * 9})
    assert r.status_code == 413 and r.json()["error"] == "inputs: 9 inputs; a request takes at most 8 (--max-inputs)"
    big = json.dumps({"inputs": ["word " * 900]}).encode()
    r = _predict(url, content=big)
    assert r.status_code == 413 and r.json()["error"] == "body: longer than 4,096 bytes (--max-body-bytes)"
    r = _predict(url, content=iter([big[:3000], big[3000:]]))  # chunked: no Content-Length to judge by
    assert r.status_code == 413 and r.json()["error_type"] == "payload_too_large"
    assert httpx.get(url + "/health").status_code == 200  # still serving


# ---------------------------------------------------------------------------- the command's own errors
def test_bad_directories_flags_and_a_busy_port_are_one_line_errors(models, tmp_path, capsys):
    import socket

    def error(*args) -> str:
        assert main(["serve", *map(str, args)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("albertlm serve: error: "), err
        return err

    assert f"{tmp_path / 'nothing'}: not a model directory" in error(tmp_path / "nothing")
    assert "holds an AlbertForPreTraining, not a fine-tuned model" in error(models["pre"])
    assert "--patience needs a model fine-tuned with --early-exit" in error(models["reg"], "--patience", "2")
    assert "--max-queue must be at least 1, got 0" in error(models["cls"], "--max-queue", "0")
    assert "--api-key must be a non-empty key without spaces" in error(models["cls"], "--api-key", "a b")
    assert "--port must lie in [0, 65535], got 70000" in error(models["cls"], "--port", "70000")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert f"--port {port}: 127.0.0.1:{port} is already in use" in error(models["cls"], "--port", port)
    assert "--host no-such-host.invalid: not an address of this machine" in error(models["cls"], "--host",
                                                                                   "no-such-host.invalid")


# ---------------------------------------------------------------------------- shutdown (last: it stops a server)
def test_a_full_queue_is_429_and_sigterm_answers_every_queued_request(servers):
    """Twelve small requests wait for a batch that would wait a minute for more (they do not fill its token
    cap); a thirteenth finds the queue full; SIGTERM runs the twelve at once and the process exits 0.
    Runs last: it stops the NER server."""
    server = servers["ner"]
    texts = [f"{name} went to {city}" for name in PEOPLE for city in CITIES][:len(_requests("ner"))]
    with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
        waiting = [pool.submit(httpx.post, server.url + "/predict", json={"inputs": [text]}, timeout=120)
                   for text in texts]
        deadline = time.monotonic() + 60
        while server.metrics()["albertlm_queue_depth"] < len(texts):
            assert time.monotonic() < deadline and not any(w.done() for w in waiting)
            time.sleep(0.02)
        r = httpx.post(server.url + "/predict", json={"inputs": "anna flew to rome"})
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert r.json()["error"].startswith(f"the server is busy: {len(texts)} requests are waiting (--max-queue")
        server.proc.send_signal(signal.SIGTERM)
        answers = [w.result() for w in waiting]
    assert [a.status_code for a in answers] == [200] * len(texts)
    assert [a.json()[0]["line"] for a in answers] == predict_lines(server.model_dir, texts, device="cpu")
    assert server.proc.wait(timeout=60) == 0
    assert "Application shutdown complete" in server.err.read_text()
    with pytest.raises(httpx.TransportError):  # the port is closed
        httpx.get(server.url + "/health")

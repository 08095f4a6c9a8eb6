"""`albertlm serve` as a real server process on a loopback port, talked to over HTTP.

Three tiny fine-tuned directories (a classifier with exit heads, a regressor, an NER tagger, the last also
for the full queue and SIGTERM), the classifier's ONNX export, and the pretrained directory serving
embeddings only: one server process each, all started at once in a module fixture. A batch waits only for
requests known to be on their way, so the tests hold one request's body back (`Held`: the server has its
headers) to keep a batch waiting, and give the equality servers a token cap equal to the concurrent
requests' total: those requests merge into exactly one batch because they fill it, not because of a timer.
"""

from __future__ import annotations

import base64
import concurrent.futures
import importlib.util
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

import numpy as np
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
from albertlm.inference.embed import EmbedSettings, embed
from albertlm.inference.load import load_tokenizer
from albertlm.train.embedding import EmbeddingSettings, finetune_embedder
from albertlm.train.finetune import FinetuneRecipe, finetune
from albertlm.inference.predict import predict_lines
from test_distill import FILL, NEG, POS, RECIPE, write_sst, write_stsb
from test_finetune import CITIES, PEOPLE, VERBS, write_conll

ONNX = all(importlib.util.find_spec(name) is not None for name in ("onnx", "onnxruntime"))
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


class Held:
    """A POST whose body is held back after its first byte: the server has the request's headers and is
    reading it, so its batcher counts it on its way (`albertlm_requests_arriving`) until `release`."""

    def __init__(self, server: Server, route: str, body: dict, headers: dict | None = None):
        self.server, self.gate = server, threading.Event()
        data = json.dumps(body).encode()
        before = server.metrics()["albertlm_requests_arriving"]

        def content():
            yield data[:1]
            self.gate.wait(120)
            yield data[1:]

        self.pool = concurrent.futures.ThreadPoolExecutor(1)
        self.answer = self.pool.submit(httpx.post, server.url + route, content=content(), headers=headers, timeout=180)
        deadline = time.monotonic() + 60
        while server.metrics()["albertlm_requests_arriving"] < before + 1:  # the route has started reading it
            assert time.monotonic() < deadline and not self.answer.done(), "the held request never arrived"
            time.sleep(0.02)

    def release(self) -> httpx.Response:
        self.gate.set()
        try:
            return self.answer.result(timeout=120)
        finally:
            self.pool.shutdown()


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
    finetune_embedder("sts-b", pre, root / "stsb", root / "emb", FinetuneRecipe(**two), EmbeddingSettings("cosent"),
                      progress=False)
    torch.set_num_threads(threads)
    out = {**dirs, "pre": pre, "emb": root / "emb", "root": root, "onnx": None}
    if ONNX:
        assert main(["export", str(dirs["cls"]), str(root / "cls.onnx"), "--exporter", "legacy"]) == 0
        out["onnx"] = root / "cls.onnx"
    return out


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
        "enc": Server(models["pre"], logs / "enc", "--max-wait-ms", "60000", "--max-queue", "4", "--max-inputs", "6",
                      "--max-body-bytes", "2048", "--keep-alive-s", "1"),
        "emb": Server(models["emb"], logs / "emb"),
    }
    if models["onnx"] is not None:
        started["onnx"] = Server(models["cls"], logs / "onnx", "--onnx", str(models["onnx"]), "--pooling", "cls")
    try:
        yield {name: s.wait_ready() for name, s in started.items()}
    finally:
        codes = {name: s.stop() for name, s in started.items()}
    assert codes == dict.fromkeys(started, 0), {n: started[n].err.read_text()[-2000:] for n in started}


# ---------------------------------------------------------------------------- answers
def _concurrently(url: str, route: str, bodies: list[dict]) -> list[httpx.Response]:
    barrier = threading.Barrier(len(bodies))

    def ask(body):
        barrier.wait()
        return httpx.post(url + route, json=body, headers=AUTH, timeout=120)

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(ask, bodies))


@pytest.mark.parametrize("kind", ["cls", "reg", "ner"])
def test_concurrent_clients_get_predicts_answers_from_one_merged_batch(servers, models, kind):
    server = servers[kind]
    bodies = _requests(kind)
    held_text = "a good film ." if kind != "ner" else "anna went to rome"
    held = Held(server, "/predict", {"inputs": held_text}, AUTH)  # the first batch waits for it ...
    responses = _concurrently(server.url, "/predict", [{"inputs": inputs} for inputs in bodies])
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
    m = server.metrics()  # ... until the concurrent requests fill it
    assert m["albertlm_batch_requests_count"] == 1 and m["albertlm_batch_requests_sum"] == len(bodies)
    assert m["albertlm_batch_inputs_sum"] == len(lines)
    assert m["albertlm_queue_depth"] == 0 and m["albertlm_requests_arriving"] == 1
    if kind == "cls":
        assert m["albertlm_early_exit_layers_count"] == len(lines)
        assert m["albertlm_early_exit_layers_sum"] == sum(layers)
    late = held.release()
    assert late.status_code == 200 and late.json()["line"] == predict_lines(models[kind], [held_text], device="cpu",
                                                                            patience=1 if kind == "cls" else None)[0]
    m = server.metrics()
    assert m["albertlm_batch_requests_count"] == 2 and m["albertlm_requests_arriving"] == 0


def test_a_lone_request_runs_at_once_though_the_server_would_wait_a_minute_for_more(servers):
    """--max-wait-ms 60000 and a token cap far above one request: nothing else is on its way, so the request
    runs in a batch of its own at once (the client's 30 s timeout is a hang guard, not a speed check)."""
    server = servers["reg"]
    before = server.metrics()
    r = httpx.post(server.url + "/predict", json={"inputs": ["a good film .", "a dull plot ."]}, timeout=30)
    assert r.status_code == 200 and len(r.json()) == 2
    m = server.metrics()
    assert m["albertlm_batch_requests_count"] == before["albertlm_batch_requests_count"] + 1
    assert m["albertlm_batch_inputs_sum"] == before["albertlm_batch_inputs_sum"] + 2


def test_info_health_and_metrics(servers, models):
    cls = servers["cls"]
    info = httpx.get(cls.url + "/info", headers=AUTH).json()
    assert info["model_dir"] == str(models["cls"]) and info["task"] == "sst-2"
    assert info["head"] == "AlbertForSequenceClassification" and info["labels"] == ["0", "1"]
    assert info["backend"] == "fp32" and info["early_exit"] == {"patience": 1, "layers": 2}
    assert info["predict"] is True and info["no_predict"] is None and info["onnx_file"] is None
    assert info["embedding"] == {"pooling": "mean", "normalize": False, "dimensions": 32, "max_seq_length": 128,
                                 "device": "cpu", "backend": "fp32", "encoder": "shared"}
    assert info["limits"]["max_inputs"] == 8 and info["limits"]["max_body_bytes"] == 4096 and info["api_key"] is True
    assert KEY not in json.dumps(info)
    ner = httpx.get(servers["ner"].url + "/info").json()
    assert ner["family"] == "ner" and "B-PER" in ner["labels"]
    assert httpx.get(cls.url + "/health").json() == {"status": "ok"}
    r = httpx.get(cls.url + "/metrics", headers=AUTH)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert cls.metrics()["albertlm_requests_total{code=200,route=/health}"] >= 1
    assert httpx.post(cls.url + "/predict", json={"inputs": []}, headers=AUTH).json() == []


def _health_on(sock) -> bytes:
    """One keep-alive GET /health on an open socket; the raw answer."""
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    return answer


def test_an_idle_keep_alive_connection_stays_open_for_keep_alive_s(servers):
    """--keep-alive-s 1 closes an idle connection after a second; the default (30) keeps it for the
    client's next request, over the same socket."""
    import socket
    from urllib.parse import urlsplit

    def connect(server):
        u = urlsplit(server.url)
        return socket.create_connection((u.hostname, u.port), timeout=10)

    with connect(servers["enc"]) as short, connect(servers["reg"]) as default:
        assert b" 200 " in _health_on(short) and b" 200 " in _health_on(default)
        time.sleep(2.5)
        assert short.recv(4096) == b""  # the server closed it
        assert b" 200 " in _health_on(default)  # still open
    assert httpx.get(servers["enc"].url + "/info").json()["limits"]["keep_alive_s"] == 1


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
    assert httpx.post(url + "/embed", json={"inputs": "a good film ."}).status_code == 401
    assert httpx.post(url + "/v1/embeddings", json={"input": "a good film ."}, headers={"Authorization": "Bearer no"}
                      ).status_code == 401
    assert httpx.post(url + "/embed", json={"inputs": "a good film ."}, headers=AUTH).status_code == 200
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


# ---------------------------------------------------------------------------- an ONNX file
def test_an_onnx_file_answers_as_predict_and_embeddings_still_come_from_the_directory(servers, models, tmp_path):
    if "onnx" not in servers:
        pytest.skip("onnx and onnxruntime are not installed")
    server = servers["onnx"]
    info = httpx.get(server.url + "/info").json()
    assert info["backend"] == "onnx" and info["onnx_file"] == str(models["onnx"]) and info["device"] == "cpu"
    assert info["head"] == "AlbertForSequenceClassification" and info["early_exit"] is None
    assert info["embedding"]["pooling"] == "cls" and info["embedding"]["backend"] == "fp32"
    assert info["embedding"]["encoder"] == "second copy"  # the file holds no torch backbone to share
    lines = [line for inputs in _requests("cls") for line in _lines(inputs)]
    r = httpx.post(server.url + "/predict", json={"inputs": [line.split("\t") if "\t" in line else line
                                                             for line in lines[:8]]}, timeout=60)
    assert r.status_code == 200
    expected = [line.split("\t") for line in predict_lines(models["cls"], lines[:8], device="cpu")]
    assert [a["label"] for a in r.json()] == [label for label, _ in expected]
    assert [a["score"] for a in r.json()] == pytest.approx([float(score) for _, score in expected], abs=2e-4)
    texts = ["a good film .", "", "the plot was dull and the actor awful"]
    r = httpx.post(server.url + "/embed", json={"inputs": texts}, timeout=60)
    assert np.abs(np.array(r.json()) - _cli_embed(models["cls"], texts, tmp_path, "--pooling", "cls")).max() < 1e-6


# ---------------------------------------------------------------------------- embeddings
EMBED_TEXTS = ["a good film .", "", "the movie was a film plot actor story and it very really quite so " * 3,
               "dull", "lovely superb fun", "   "]


def _cli_embed(model_dir: Path, texts: list[str], tmp_path: Path, *flags: str) -> np.ndarray:
    """What `albertlm embed` writes for these texts, one per line."""
    source, out = tmp_path / "texts.txt", tmp_path / "vectors.npy"
    source.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    assert main(["embed", str(model_dir), "--input", str(source), "--output", str(out), "--device", "cpu",
                 "--no-progress", *flags]) == 0
    return np.load(out)


def test_embed_routes_give_albertlm_embeds_vectors(servers, models, tmp_path):
    """/embed (TEI's shape) and /v1/embeddings (OpenAI's) on a pretrained directory: one request of the same
    texts is `albertlm embed`'s batch, so the vectors are its own (to 1e-6); requests merged with others
    pad differently and agree to float rounding (1e-5, as docs/embeddings.md says of padding)."""
    url = servers["enc"].url
    plain, unit = _cli_embed(models["pre"], EMBED_TEXTS, tmp_path), _cli_embed(models["pre"], EMBED_TEXTS, tmp_path,
                                                                               "--normalize")
    r = httpx.post(url + "/embed", json={"inputs": EMBED_TEXTS}, timeout=60)
    assert r.status_code == 200 and np.abs(np.array(r.json()) - plain).max() < 1e-6
    r = httpx.post(url + "/embed", json={"inputs": EMBED_TEXTS, "normalize": True}, timeout=60)
    assert np.abs(np.array(r.json()) - unit).max() < 1e-6 and not np.allclose(unit, plain)
    one = httpx.post(url + "/embed", json={"inputs": EMBED_TEXTS[0]}, timeout=60).json()
    alone = _cli_embed(models["pre"], EMBED_TEXTS[:1], tmp_path)
    assert len(one) == 1 and np.abs(np.array(one[0]) - alone[0]).max() < 1e-6  # a string: a list of one vector
    assert httpx.post(url + "/embed", json={"inputs": []}).json() == []

    tokenizer = load_tokenizer(models["pre"])
    tokens = sum(min(len(tokenizer.encode(t)) + 2, 128) for t in EMBED_TEXTS[:4])
    r = httpx.post(url + "/v1/embeddings", json={"input": EMBED_TEXTS[:4], "model": "albert-tiny"}, timeout=60)
    answer = r.json()
    assert r.status_code == 200 and answer["object"] == "list" and answer["model"] == "albert-tiny"
    assert answer["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert [(d["object"], d["index"]) for d in answer["data"]] == [("embedding", i) for i in range(4)]
    assert np.abs(np.array([d["embedding"] for d in answer["data"]]) - _cli_embed(
        models["pre"], EMBED_TEXTS[:4], tmp_path)).max() < 1e-6
    r = httpx.post(url + "/v1/embeddings", json={"input": EMBED_TEXTS[:4], "encoding_format": "base64"}, timeout=60)
    vectors = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]]
    assert r.json()["model"] == str(models["pre"])  # none named: the directory
    assert np.array_equal(np.stack(vectors), np.float32([d["embedding"] for d in answer["data"]]))

    held = Held(servers["enc"], "/embed", {"inputs": "held"})  # the batch waits: the three below merge with it
    bodies = [{"inputs": [t]} for t in EMBED_TEXTS[:2]] + [{"inputs": EMBED_TEXTS[2:], "normalize": True}]
    before = servers["enc"].metrics()["albertlm_batch_requests_count"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        merged = pool.submit(_concurrently, url, "/embed", bodies)
        deadline = time.monotonic() + 60
        while servers["enc"].metrics()["albertlm_queue_depth"] < len(bodies):
            assert time.monotonic() < deadline and not merged.done()
            time.sleep(0.02)
        assert len(held.release().json()) == 1
        responses = merged.result()
    assert servers["enc"].metrics()["albertlm_batch_requests_count"] == before + 1  # all four in one batch
    got = np.array([v for r in responses for v in r.json()])
    want = np.concatenate([plain[:2], unit[2:]])
    assert np.abs(got - want).max() < 1e-5


def test_an_encoder_directory_answers_predict_with_501_naming_the_reason(servers, models):
    url = servers["enc"].url
    info = httpx.get(url + "/info").json()
    assert info["predict"] is False and info["head"] is None and info["backend"] == "fp32"
    assert info["embedding"]["pooling"] == "mean" and info["embedding"]["normalize"] is False
    assert info["embedding"]["encoder"] == "own"
    r = httpx.post(url + "/predict", json={"inputs": "a good film ."})
    assert r.status_code == 501 and r.json()["error_type"] == "unsupported"
    assert r.json()["error"] == (f"{models['pre']} holds an AlbertForPreTraining, which has no task head: this "
                                 "server answers /embed and /v1/embeddings only (serve a fine-tuned directory for "
                                 "/predict)") == info["no_predict"]
    assert "embeddings only" in servers["enc"].err.read_text()


def test_a_sentence_embedder_answers_predict_with_the_cosine_albertlm_predict_prints(servers, models, tmp_path,
                                                                                    capsys):
    url, emb = servers["emb"].url, models["emb"]
    info = httpx.get(url + "/info").json()
    assert info["predict"] is True and info["no_predict"] is None and info["head"] is None and info["task"] == "sts-b"
    assert info["pair_scores"]["score"] == "score_map" and info["pair_scores"]["objective"] == "cosent"
    assert "score_map" not in info["pair_scores"]  # its knots stay in config.json
    assert "a sentence embedder (/predict: the cosine of each text pair" in servers["emb"].err.read_text()
    lines = [f"{' '.join(FILL[:3])} {POS[0]} .\t{' '.join(FILL[2:5])} {POS[1]} .",
             f"{' '.join(FILL[:3])} {NEG[0]} .\t{' '.join(FILL[1:4])} {POS[0]} .", f"{NEG[1]}\t{FILL[4]} {FILL[0]}"]
    served = httpx.post(url + "/predict", json={"inputs": lines}, timeout=120)
    assert served.status_code == 200, served.text
    file = tmp_path / "pairs.txt"
    file.write_text("\n".join(lines) + "\n")
    assert main(["predict", "--model", str(emb), str(file)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [a["line"] for a in served.json()] == printed and len(printed) == 3
    # trained on graded pairs: the cosine, and the score its map gives, as `albertlm predict` prints them
    assert [[a["cosine"], a["score"]] for a in served.json()] == [
        [round(float(x), 4) for x in line.split("\t")] for line in printed]
    assert len(set(printed)) > 1  # different pairs, different scores: the answers are the pairs' own
    single = httpx.post(url + "/predict", json={"inputs": lines[1]}, timeout=120).json()
    assert single["line"] == printed[1]
    one = httpx.post(url + "/predict", json={"inputs": [lines[0], "just one text"]}, timeout=60)
    assert one.status_code == 422 and one.json()["error"] == (
        f"inputs[1]: {emb} is a sentence embedder; it scores text pairs, one text_a<TAB>text_b per line (for one "
        "text's vector: POST /embed)")
    vectors = httpx.post(url + "/embed", json={"inputs": ["a good film ."]}, timeout=60).json()
    assert np.allclose(vectors, _cli_embed(emb, ["a good film ."], tmp_path), atol=1e-5)


@pytest.mark.parametrize("route, body, status, message", [
    ("/embed", {"text": "x"}, 422, r'^body: expected a JSON object \{"inputs": \.\.\.\}$'),
    ("/embed", {"inputs": "x", "truncate": True}, 422,
     r"^body: unknown field 'truncate' \(the body takes only inputs, normalize\)$"),
    ("/embed", {"inputs": ["x", 3]}, 422, r"^inputs\[1\]: expected a string$"),
    ("/embed", {"inputs": 3}, 422, r"^inputs: expected a string or a list of strings$"),
    ("/embed", {"inputs": "x", "normalize": "yes"}, 422, r"^normalize: expected true or false$"),
    ("/embed", {"inputs": ["x"] * 7}, 413, r"^inputs: 7 inputs; a request takes at most 6 \(--max-inputs\)$"),
    ("/embed", {"inputs": ["word " * 500]}, 413, r"^body: longer than 2,048 bytes \(--max-body-bytes\)$"),
    ("/v1/embeddings", {"inputs": "x"}, 422, r'^body: expected a JSON object \{"input": \.\.\.\}$'),
    ("/v1/embeddings", {"input": [[1, 2, 3]]}, 422, r"^input\[0\]: expected a string \(token ids are not taken"),
    ("/v1/embeddings", {"input": "x", "dimensions": 8}, 422, r"^body: unknown field 'dimensions' \(the body takes "
     r"only input, model, encoding_format, user\)$"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, 422,
     r'^encoding_format: expected "float" or "base64", got "int8"$'),
    ("/v1/embeddings", {"input": "x", "model": 7}, 422, r"^model: expected a string$"),
    ("/v1/embeddings", {"input": ["x"] * 7}, 413, r"^input: 7 inputs; a request takes at most 6 \(--max-inputs\)$"),
])
def test_bad_embedding_bodies_are_refused_naming_the_field(servers, route, body, status, message):
    r = httpx.post(servers["enc"].url + route, json=body, timeout=60)
    assert r.status_code == status and re.search(message, r.json()["error"]), r.json()


def test_a_full_queue_refuses_embeddings_with_429(servers):
    """--max-queue 4: a held request keeps the batch waiting, four requests queue, a fifth is refused; the
    held one, finding the queue full too, is refused, and the four then run."""
    server = servers["enc"]
    held = Held(server, "/v1/embeddings", {"input": "held"})
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        waiting = [pool.submit(httpx.post, server.url + "/embed", json={"inputs": t}, timeout=120)
                   for t in EMBED_TEXTS[:4]]
        deadline = time.monotonic() + 60
        while server.metrics()["albertlm_queue_depth"] < 4:
            assert time.monotonic() < deadline and not any(w.done() for w in waiting)
            time.sleep(0.02)
        r = httpx.post(server.url + "/v1/embeddings", json={"input": "one more"})
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert r.json()["error"] == "the server is busy: 4 requests are waiting (--max-queue 4); retry later"
        assert held.release().status_code == 429
        assert [w.result().status_code for w in waiting] == [200] * 4


def _held(module: torch.nn.Module) -> tuple[set[int], set[int]]:
    """Where a module's weights are: the storage of its parameters and buffers (data_ptr), and its int8 Linear
    layers by identity (their packed weights are neither parameters nor buffers)."""
    from albertlm.inference.quantize import is_int8_linear

    return ({t.data_ptr() for t in (*module.parameters(), *module.buffers())},
            {id(m) for m in module.modules() if is_int8_linear(m)})


@pytest.mark.filterwarnings("ignore:int8 backend fbgemm")
@pytest.mark.parametrize("flags", [{}, {"patience": 1}, {"int8": True}], ids=["fp32", "early-exit", "int8"])
def test_a_fine_tuned_directory_embeds_with_the_predict_models_encoder(models, tmp_path, flags):
    """In-process: the embedding routes hold no second copy of the encoder (every tensor and every int8 Linear of
    both embedders, default and flipped normalisation, is the /predict model's), and the vectors are exactly
    `albertlm embed`'s on the same directory and flags (one batch: the same padding)."""
    served = ServedModel(models["cls"], ServeSettings(device="cpu", **flags))
    assert served.describe()["embedding"]["encoder"] == "shared"
    predict_tensors, predict_int8 = _held(served.loaded.model)
    for embedder in served._embedders.values():
        tensors, int8 = _held(embedder.model)
        assert tensors and tensors <= predict_tensors and int8 <= predict_int8
        assert bool(int8) == flags.get("int8", False)  # an int8 server embeds in int8, as embed --int8 does
    cli = ["--int8"] if flags.get("int8") else []
    assert np.array_equal(served.embed(EMBED_TEXTS), _cli_embed(models["cls"], EMBED_TEXTS, tmp_path, *cli))
    assert np.array_equal(served.embed(EMBED_TEXTS, normalize=True),
                          _cli_embed(models["cls"], EMBED_TEXTS, tmp_path, "--normalize", *cli))
    lines = ["a good film .", "a bad film ."]  # and /predict still answers as albertlm predict
    assert [a["line"] for a in served.predict(lines)] == predict_lines(
        models["cls"], lines, device="cpu", patience=flags.get("patience"), int8="fbgemm" if cli else None)


def test_the_default_pooling_is_a_sentence_transformers_directorys_own(models, tmp_path):
    """In-process: a sentence-transformers directory serves embeddings only, with its pooling and Normalize
    module unless --pooling / --normalize say otherwise; a request's `normalize` picks either."""
    from albertlm.st_directory import write_sentence_transformers

    st = tmp_path / "st"
    write_sentence_transformers(models["pre"], st, pooling="max", normalize=True)
    served = ServedModel(st, ServeSettings(device="cpu"))
    assert (served.embedder.pooling, served.normalize) == ("max", True)
    assert "holds a sentence-transformers directory, which has no task head" in served.no_predict
    want = embed(st, EMBED_TEXTS, EmbedSettings(device="cpu", progress=False))
    assert np.abs(served.embed(EMBED_TEXTS) - want).max() < 1e-6
    plain = embed(st, EMBED_TEXTS, EmbedSettings(device="cpu", normalize=False, progress=False))
    assert np.abs(served.embed(EMBED_TEXTS, normalize=False) - plain).max() < 1e-6
    flags = ServedModel(st, ServeSettings(device="cpu", pooling="cls", normalize=False))
    assert (flags.embedder.pooling, flags.normalize) == ("cls", False)
    with pytest.raises(AlbertlmError, match="no task head"):
        served.predict(["a good film ."])


# ---------------------------------------------------------------------------- the command's own errors
def test_bad_directories_flags_and_a_busy_port_are_one_line_errors(models, tmp_path, capsys):
    import socket

    def error(*args) -> str:
        assert main(["serve", *map(str, args)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("albertlm serve: error: "), err
        return err

    assert f"{tmp_path / 'nothing'}: not a model directory" in error(tmp_path / "nothing")
    assert "--patience needs a fine-tuned directory: " in error(models["pre"], "--patience", "2")
    assert f"--patience needs a fine-tuned directory: {models['emb']} is a sentence embedder" in error(
        models["emb"], "--patience", "1")
    assert "--patience needs a model fine-tuned with --early-exit" in error(models["reg"], "--patience", "2")
    assert "pooling 'pooler' needs ALBERT's pooler" in error(models["ner"], "--pooling", "pooler")
    onnx = tmp_path / "any.onnx"
    assert "--onnx runs the graph as exported; drop --int8" in error(models["cls"], "--onnx", onnx, "--int8")
    assert "--patience runs the torch model's exit heads and an ONNX file holds the plain head only" in error(
        models["cls"], "--onnx", onnx, "--patience", "1")
    assert "--onnx runs on the CPU (onnxruntime); drop --device cuda" in error(models["cls"], "--onnx", onnx,
                                                                               "--device", "cuda")
    assert "--onnx needs a fine-tuned directory: " in error(models["pre"], "--onnx", onnx)
    assert f"{onnx}: no such ONNX file" in error(models["cls"], "--onnx", onnx)
    assert "--max-queue must be at least 1, got 0" in error(models["cls"], "--max-queue", "0")
    assert "--keep-alive-s must be at least 1, got 0" in error(models["cls"], "--keep-alive-s", "0")
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
    """A held request keeps the batch waiting (a minute at most) for it; twelve small requests queue behind
    it without filling the token cap; a thirteenth finds the queue full; SIGTERM runs the twelve at once,
    the held one (its body sent after the signal) gets 503, and the process exits 0. Runs last: it stops
    the NER server."""
    server = servers["ner"]
    texts = [f"{name} went to {city}" for name in PEOPLE for city in CITIES][:len(_requests("ner"))]
    held = Held(server, "/predict", {"inputs": "anna went to rome"})
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
    late = held.release()
    assert late.status_code == 503 and late.json() == {"error": "the server is shutting down",
                                                       "error_type": "unavailable"}
    assert server.proc.wait(timeout=60) == 0
    assert "Application shutdown complete" in server.err.read_text()
    with pytest.raises(httpx.TransportError):  # the port is closed
        httpx.get(server.url + "/health")

"""Docker hosts from configuration, and the nodes (GPUs) they give the engine.

A host is `name=url`, several separated by commas or given as a list:

    gpu1=unix:///var/run/docker.sock?gpus=4,gpu2=ssh://sched@gpu2,gpu3=tcp://10.0.0.3:2376?address=10.0.0.3

or as dicts `{"name": ..., "url": ..., "gpus": 4, "address": ...}`. The url is a Docker daemon
URL: `unix://` (this machine), `tcp://host:port`, `ssh://user@host` (the `ssh` client is used, so
keys and `~/.ssh/config` apply). Options after `?`:

* `gpus=N` — declare N **virtual** GPUs (no device is passed to containers; jobs see only
  `CUDA_VISIBLE_DEVICES`). Without it the GPUs are **discovered**: a probe container with every
  GPU requested (`device_requests`, capabilities gpu+utility) runs `nvidia-smi`, which reads NVML
  on that host. Discovery needs real GPUs and the NVIDIA container toolkit on the host; where it
  finds none the host has no GPUs (and says why in `DockerHost.error`).
* `address=A` — how workers on other hosts reach this host's network (`network_mode=host`): the
  torchrun rendezvous endpoint and the Horovod `-H` list. Default: the url's hostname, or
  `127.0.0.1` for `unix://`. Several `unix://` hosts (daemons on one machine, as in the tests)
  get 127.0.0.1, 127.0.0.2, ...: torchrun tells nodes apart by address and pid, and containers
  on one machine can have equal pids.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..model import Gpu, Node, SpecError

log = logging.getLogger("schedulearn.executors.hosts")

SCHEMES = ("unix", "tcp", "ssh")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_OPTIONS = ("gpus", "address")
NVIDIA_SMI_QUERY = "index,uuid,name,memory.total,memory.used,utilization.gpu"


@dataclass
class DockerHost:
    name: str
    url: str  # the Docker URL, without our `?options`
    gpus: int | None = None  # declared virtual GPUs; None = discover
    address: str = ""
    error: str | None = None  # why the last probe or discovery failed
    discovered: list[Gpu] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.address:
            self.address = default_address(self.url)

    @property
    def virtual(self) -> bool:
        return self.gpus is not None

    def client(self, timeout: float | None = 30.0, pool: int = 10) -> Any:
        """A docker SDK client for this host (asks the daemon its API version: raises when down)."""
        import docker

        return docker.DockerClient(base_url=self.url, version="auto", timeout=timeout,
                                   use_ssh_client=self.url.startswith("ssh://"), max_pool_size=pool)

    def to_node(self, healthy: bool = True) -> Node:
        if self.gpus is not None:
            gpus = [Gpu(index=i, uuid=f"virtual-{self.name}-{i}") for i in range(self.gpus)]
            return Node(self.name, gpus, virtual=True, address=self.url, healthy=healthy)
        gpus = [Gpu(**{**g.to_dict()}) for g in self.discovered]
        return Node(self.name, gpus, virtual=False, address=self.url, healthy=healthy)


def default_address(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "unix" or not parts.hostname:
        return "127.0.0.1"
    return parts.hostname


def parse_host(name: str, url: str, **options: Any) -> DockerHost:
    """One host; raises `SpecError` (one line naming the field) on bad input."""
    if not _NAME.match(name or ""):
        raise SpecError(f"docker_hosts: host name must be letters, digits, '.', '_' or '-', got {name!r}")
    url = (url or "").strip()
    if "?" in url:
        url, query = url.split("?", 1)
        for k, v in parse_qsl(query, keep_blank_values=True):
            options.setdefault(k, v)
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES or url == f"{scheme}://":
        raise SpecError(f"docker_hosts: url of {name!r} must start with one of "
                        f"{', '.join(s + '://' for s in SCHEMES)}, got {url!r}")
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise SpecError(f"docker_hosts: unknown option {unknown[0]!r} for {name!r}; "
                        f"allowed: {', '.join(_OPTIONS)}")
    gpus = options.get("gpus")
    if gpus is not None and gpus != "auto":
        try:
            gpus = int(gpus)
            if gpus < 0:
                raise ValueError
        except (TypeError, ValueError):
            raise SpecError(f"docker_hosts: gpus of {name!r} must be an integer >= 0 or 'auto', "
                            f"got {options['gpus']!r}") from None
    else:
        gpus = None
    return DockerHost(name, url, gpus, str(options.get("address") or ""))


def parse_hosts(config: str | Iterable[Any] | Mapping[str, str]) -> list[DockerHost]:
    """Hosts from `name=url[?opts],...`, a list of such strings or dicts, or {name: url}."""
    items: list[DockerHost] = []
    if isinstance(config, str):
        config = [p for p in (s.strip() for s in config.split(",")) if p]
    elif isinstance(config, Mapping):
        config = [f"{k}={v}" for k, v in config.items()]
    for item in config:
        if isinstance(item, DockerHost):
            items.append(item)
        elif isinstance(item, Mapping):
            d = dict(item)
            try:
                name, url = d.pop("name"), d.pop("url")
            except KeyError as e:
                raise SpecError(
                    f"docker_hosts: each host needs 'name' and 'url', missing {e.args[0]!r}") from None
            items.append(parse_host(str(name), str(url), **d))
        elif isinstance(item, str) and "=" in item:
            name, url = item.split("=", 1)
            items.append(parse_host(name.strip(), url.strip()))
        else:
            raise SpecError(
                f"docker_hosts: expected name=url (e.g. gpu1=unix:///var/run/docker.sock), got {item!r}")
    if not items:
        raise SpecError("docker_hosts: expected at least one name=url")
    local = [h for h in items if h.url.startswith("unix://") and h.address == "127.0.0.1"]
    taken = {h.address for h in items}
    for n, h in enumerate(local[1:], start=2):  # distinct loopback addresses, see the module doc
        while f"127.0.0.{n}" in taken:
            n += 1
        h.address = f"127.0.0.{n}"
        taken.add(h.address)
    names = [h.name for h in items]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise SpecError(f"docker_hosts: host name {dup!r} given twice")
    return items


def ping(host: DockerHost, timeout: float = 5.0) -> bool:
    """Whether the host's daemon answers; sets `host.error` when it does not."""
    try:
        client = host.client(timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as e:  # noqa: BLE001 - any failure means "down", with its reason kept
        host.error = f"docker host {host.name} ({host.url}) unreachable: {short_error(e)}"
        return False
    host.error = None
    return True


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """GPUs from `nvidia-smi --query-gpu=NVIDIA_SMI_QUERY --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 6 or not cols[0].isdigit():
            continue

        def num(s: str) -> float:
            try:
                return float(s)
            except ValueError:  # "[N/A]" (MIG, some boards)
                return 0.0

        gpus.append(Gpu(index=int(cols[0]), uuid=cols[1], name=cols[2], memory_total_mb=int(num(cols[3])),
                        memory_used_mb=int(num(cols[4])), utilization=num(cols[5]), virtual=False))
    return gpus


def discover_gpus(host: DockerHost, image: str, timeout: float = 60.0) -> list[Gpu]:
    """The host's real GPUs, read by `nvidia-smi` in a probe container given every GPU.

    Needs the NVIDIA container toolkit on the host (it injects `nvidia-smi`); returns [] and sets
    `host.error` when the host has none."""
    from docker.types import DeviceRequest

    client = None
    container = None
    try:
        client = host.client(timeout=timeout)
        container = client.containers.create(
            image, ["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"],
            network_mode="host", labels={"schedulearn.probe": "gpus"},
            device_requests=[DeviceRequest(count=-1, capabilities=[["gpu", "utility"]])])
        container.start()
        code = container.wait(timeout=timeout)["StatusCode"]
        out = container.logs(stdout=True, stderr=False)
        if code != 0:
            raise RuntimeError(f"nvidia-smi exited with {code}")
    except Exception as e:  # noqa: BLE001
        host.error = f"docker host {host.name}: no GPUs discovered: {short_error(e)}"
        return []
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - best effort
                pass
        if client is not None:
            client.close()
    gpus = parse_nvidia_smi(out.decode("utf-8", "replace"))
    host.discovered = gpus
    host.error = None if gpus else f"docker host {host.name}: nvidia-smi listed no GPUs"
    return gpus


def host_nodes(hosts: Iterable[DockerHost], probe_image: str | None = None) -> list[Node]:
    """The engine's nodes for `hosts`: declared GPUs as they are, others discovered (with
    `probe_image`); a host that does not answer is a node marked unhealthy."""
    nodes = []
    for h in hosts:
        up = ping(h)
        if up and h.gpus is None and probe_image:
            discover_gpus(h, probe_image)
        if h.error:
            log.warning("%s", h.error)
        nodes.append(h.to_node(healthy=up))
    return nodes


def short_error(e: BaseException) -> str:
    """A docker SDK / requests error as one short line."""
    explanation = getattr(e, "explanation", None)
    text = str(explanation) if explanation else str(e)
    m = re.search(r"unable to start container process: (.*?)(?:: unknown)?$", text)
    if m:
        text = m.group(1)
    m = re.search(r"(\w+Error)\((?:\d+, )?'([^']*)'\)", text)  # requests: (..., FileNotFoundError(2, '...'))
    if m:
        text = f"{m.group(1)}: {m.group(2)}"
    text = " ".join(text.split())
    return text if len(text) <= 240 else text[:237] + "..."

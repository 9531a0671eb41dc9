"""The engine's MetricsState as Prometheus text, through prometheus_client (the same library vLLM uses).

A custom collector reads the live state at scrape time, so counters keep their `_created` samples, histograms
their cumulative `le` buckets, and the text format is byte-for-byte prometheus_client's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from specpilot.sim.engine import Engine
from specpilot.sim.metrics import Kind


class EngineCollector(Collector):
    """Yields every vllm: family of the engine `current()` returns (the engine is replaced on a restart)."""

    def __init__(self, current: Callable[[], Engine]) -> None:
        self.current = current

    def collect(self) -> Iterator[Metric]:
        engine = self.current()
        state = engine.metrics
        model = engine.config.model_name
        for fam in state.layout:
            names = sorted([*fam.base_labels, *fam.labels])

            def labels(
                extra: tuple[str, ...], fam_labels: tuple[str, ...] = fam.labels, order: list[str] = names
            ) -> list[str]:
                values = {"engine": "0", "model_name": model, **dict(zip(fam_labels, extra, strict=True))}
                return [values[n] for n in order]

            if fam.kind is Kind.COUNTER:
                counter = CounterMetricFamily(fam.name, fam.help, labels=names)
                for key, value in state.counters[fam.name].items():
                    counter.add_metric(labels(key), value, created=state.created)
                yield counter
            elif fam.kind is Kind.GAUGE:
                gauge = GaugeMetricFamily(fam.name, fam.help, labels=names)
                if fam.name == "vllm:cache_config_info":
                    info = engine.cache_config_labels()
                    values = {"engine": "0", "model_name": model}
                    gauge.add_metric([info.get(n, values.get(n, "None")) for n in names], 1.0)
                else:
                    for key, value in state.gauges[fam.name].items():
                        gauge.add_metric(labels(key), value)
                yield gauge
            else:
                hist = state.histograms[fam.name]
                family = HistogramMetricFamily(fam.name, fam.help, labels=names)
                bounds = [*fam.buckets, float("inf")]
                buckets = [(_go(b), float(c)) for b, c in zip(bounds, hist.cumulative(), strict=True)]
                family.add_metric(labels(()), buckets, hist.total)
                family.samples.append(
                    Sample(f"{fam.name}_created", dict(zip(names, labels(()), strict=True)), state.created)
                )
                yield family


def _go(bound: float) -> str:
    """A bucket bound as prometheus_client writes `le` (1.0, 0.005, +Inf)."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


def make_registry(current: Callable[[], Engine], *, process: bool = True) -> CollectorRegistry:
    """A registry with the engine's families (and, like vLLM's default registry, python_/process_ collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    if process:
        GCCollector(registry=registry)
        PlatformCollector(registry=registry)
        ProcessCollector(registry=registry)
    registry.register(EngineCollector(current))
    return registry


def exposition(engine: Engine) -> str:
    """The /metrics text of one engine (vllm: families only)."""
    return generate_latest(make_registry(lambda: engine, process=False)).decode()

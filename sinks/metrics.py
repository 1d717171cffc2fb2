"""Delivery metrics, rendered at scrape time from the delivery's own counters.

``DeliveryCollector(delivery).collect()`` yields:

- ``wtwind_deliveries_total{sink,outcome}``: alerts by outcome
  (success, retry, dead, dropped, disabled);
- ``wtwind_outbox_pending{sink}``, ``wtwind_outbox_dead{sink}``: outbox rows now;
- ``wtwind_sink_disabled{sink}``: 1 when a sink disabled itself (Slack 404/410);
- ``wtwind_alerts_dropped_total``: alerts lost: the intake queue was full, or their
  outbox rows could not be written;
- ``wtwind_delivery_errors_total``: errors caught at the delivery's task boundaries.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class DeliveryCollector:
    def __init__(self, delivery) -> None:
        self.delivery = delivery

    def describe(self):
        """Every family ``collect`` yields, by name and type (no values)."""
        counters = ("wtwind_deliveries", "wtwind_alerts_dropped", "wtwind_alerts_recovered",
                    "wtwind_delivery_errors")
        gauges = ("wtwind_outbox_pending", "wtwind_outbox_dead", "wtwind_sink_disabled",
                  "wtwind_alerts_held", "wtwind_alerts_hold_size")
        return ([CounterMetricFamily(n, n) for n in counters]
                + [GaugeMetricFamily(n, n) for n in gauges])

    def collect(self):
        d = self.delivery
        deliveries = CounterMetricFamily("wtwind_deliveries", "Alert deliveries by sink and outcome",
                                         labels=["sink", "outcome"])
        for (sink, outcome), n in sorted(d.counters.values.items()):
            deliveries.add_metric([sink, outcome], n)
        yield deliveries
        counts = d.outbox.counts()
        for state in ("pending", "dead"):
            fam = GaugeMetricFamily(f"wtwind_outbox_{state}", f"Outbox rows {state}, by sink", labels=["sink"])
            for sink in d.sinks:
                fam.add_metric([sink], counts.get((sink, state), 0))
            yield fam
        disabled = GaugeMetricFamily("wtwind_sink_disabled", "1 when the sink disabled itself", labels=["sink"])
        for name, worker in d.workers.items():
            disabled.add_metric([name], 1.0 if worker.disabled else 0.0)
        yield disabled
        yield CounterMetricFamily("wtwind_alerts_dropped",
                                  "Alerts lost: delivery intake full, or outbox write failed with the hold full",
                                  value=d.counters.intake_dropped + d.counters.lost)
        yield GaugeMetricFamily("wtwind_alerts_held", "Alerts whose outbox write failed (a full disk), "
                                "kept in memory and retried; at most hold_size", value=len(d.held))
        yield GaugeMetricFamily("wtwind_alerts_hold_size", "Alerts that can wait in memory for the disk",
                                value=d.hold_size)
        yield CounterMetricFamily("wtwind_alerts_recovered", "Held alerts written once the store could again",
                                  value=d.counters.recovered)
        yield CounterMetricFamily("wtwind_delivery_errors",
                                  "Errors caught in the delivery's dispatcher and workers",
                                  value=d.counters.errors)

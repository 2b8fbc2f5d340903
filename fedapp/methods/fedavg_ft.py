"""FedAvg + fine-tuning: FedAvg training; at evaluation each client fine-tunes a copy
of the current global model for ``local-epochs`` on its own data, then tests it on
its local test split (spec fedselect §6 baselines)."""

from __future__ import annotations

from fedapp.methods.base import ClientJob, ClientPolicy, Method, ServerPolicy


class FineTuneClient(ClientPolicy):
    def evaluate(self, job: ClientJob) -> dict[str, float]:
        self.fit(job)
        return super().evaluate(job)


class FineTuneServer(ServerPolicy):
    personalized_eval = True


METHOD = Method("fedavg-ft", FineTuneServer, FineTuneClient)

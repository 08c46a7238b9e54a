"""A ledger provider's Connector package, for the connector tool tests.

``new_project_connection(base_url, name)`` gives a connection whose
``operations`` build the package's Step factories' operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dexconn_ledger._sdk import Branch, Fence, RetryError, send

__all__ = [
    "ConnectionReference",
    "CreateRefundInput",
    "GetBalanceInput",
    "LedgerConnection",
    "ListStoryIdsInput",
    "PostEntryInput",
    "RetryError",
    "SendReceiptInput",
    "new_project_connection",
]


@dataclass(frozen=True)
class ConnectionReference:
    base_url: str
    connection: str


@dataclass(frozen=True)
class GetBalanceInput:
    account: str


@dataclass(frozen=True)
class ListStoryIdsInput:
    count: int


@dataclass(frozen=True)
class CreateRefundInput:
    charge: str
    amount: int
    reason: str


@dataclass(frozen=True)
class PostEntryInput:
    account: str
    amount: int


@dataclass(frozen=True)
class SendReceiptInput:
    email: str


def _headers(call: Any, context: Any, key: str | None = None) -> dict[str, str]:
    headers = {"X-Call-Id": call.call_id, "X-Attempt": str(context.attempt)}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


def _branch_of_failure(status: int, body: dict[str, Any]) -> Branch:
    if status == 503:
        raise RetryError(
            body.get("message", "the ledger is busy"), retry_after=timedelta(seconds=1)
        )
    return Branch("defect", kind=f"http_{status}", message=body.get("message"))


class _Operation:
    connector_id = "ledger"
    operation_name = ""
    input_type: Any = None

    def __repr__(self) -> str:
        return f"ledger.{self.operation_name}()"


class _Mutation(_Operation):
    def idempotency_key(self, call: Any) -> str:
        return f"ledger:{call.call_id}"


class GetBalance(_Operation):
    operation_name = "getBalance"
    input_type = GetBalanceInput

    async def run_query(self, call: Any, context: Any) -> Branch:
        base = call.reference.base_url
        answer = await send(
            "GET", f"{base}/balance?account={call.input.account}", **_headers(call, context)
        )
        if answer.status == 200:
            return Branch("found", value=answer.body)
        if answer.status == 404:
            return Branch("notFound", kind="not_found", message=f"no account {call.input.account}")
        return _branch_of_failure(answer.status, answer.body)


class ListStoryIds(_Operation):
    operation_name = "listStoryIDs"
    input_type = ListStoryIdsInput

    async def run_query(self, call: Any, context: Any) -> Branch:
        base = call.reference.base_url
        answer = await send(
            "GET", f"{base}/stories?count={call.input.count}", **_headers(call, context)
        )
        if answer.status == 200:
            return Branch("listed", value=answer.body)
        return _branch_of_failure(answer.status, answer.body)


class CreateRefund(_Mutation):
    """A single-attempt write that uses the fence."""

    operation_name = "createRefund"
    input_type = CreateRefundInput

    async def run_mutation(self, call: Any, context: Any) -> Branch:
        fence = Fence(call, context)
        if not await fence.begin():
            return Branch("uncertain", kind="fence", message="an earlier attempt may have sent it")
        await fence.claim()
        body = {
            "charge": call.input.charge,
            "amount": call.input.amount,
            "reason": call.input.reason,
        }
        answer = await send(
            "POST",
            f"{call.reference.base_url}/refunds",
            body,
            **_headers(call, context, self.idempotency_key(call)),
        )
        if answer.status == 200:
            await fence.record_provider_id(answer.body["refundId"])
            return Branch("refunded", value=answer.body)
        if answer.headers.get("X-Not-Processed") == "1":
            await fence.record_can_resend()
        message = answer.body.get("message")
        if answer.status == 402:
            return Branch("cardDeclined", kind="card_declined", message=message)
        if answer.status == 404:
            return Branch("chargeMissing", kind="charge_missing", message=message)
        if answer.status == 418:
            return Branch("teapot", kind="undeclared", message=message)
        return _branch_of_failure(answer.status, answer.body)


class PostEntry(_Mutation):
    """A write the provider deduplicates by its idempotency key (agent.retry: safe)."""

    operation_name = "postEntry"
    input_type = PostEntryInput

    async def run_mutation(self, call: Any, context: Any) -> Branch:
        body = {"account": call.input.account, "amount": call.input.amount}
        answer = await send(
            "POST",
            f"{call.reference.base_url}/entries",
            body,
            **_headers(call, context, self.idempotency_key(call)),
        )
        if answer.status == 200:
            return Branch("posted", value=answer.body)
        if answer.status == 422:
            return Branch("rejected", kind="invalid_entry", message=answer.body.get("message"))
        return _branch_of_failure(answer.status, answer.body)


class SendReceipt(_Mutation):
    operation_name = "sendReceipt"
    input_type = SendReceiptInput

    async def run_mutation(self, call: Any, context: Any) -> Branch:
        answer = await send(
            "POST",
            f"{call.reference.base_url}/receipts",
            {"email": call.input.email},
            **_headers(call, context, self.idempotency_key(call)),
        )
        if answer.status == 200:
            return Branch("sent", value=answer.body)
        return _branch_of_failure(answer.status, answer.body)


class CloseAccount(_Mutation):
    operation_name = "closeAccount"
    input_type = GetBalanceInput

    async def run_mutation(self, call: Any, context: Any) -> Branch:
        raise AssertionError("closeAccount is not exposed to agents")


class Operations:
    """The package's Step factories, as connectorctl names them."""

    def get_balance(self) -> GetBalance:
        return GetBalance()

    def list_story_ids(self) -> ListStoryIds:
        return ListStoryIds()

    def create_refund(self) -> CreateRefund:
        return CreateRefund()

    def post_entry(self) -> PostEntry:
        return PostEntry()

    def send_receipt(self) -> SendReceipt:
        return SendReceipt()

    def close_account(self) -> CloseAccount:
        return CloseAccount()


@dataclass(frozen=True)
class LedgerConnection:
    reference: ConnectionReference
    operations: Operations


def new_project_connection(base_url: str, connection: str) -> LedgerConnection:
    """A connection to the ledger at ``base_url`` (a loopback test provider)."""
    return LedgerConnection(ConnectionReference(base_url, connection), Operations())

"""Token buckets, one per key (a job, a tenant): a burst of `capacity` at once, then
`per_s` a second. A key whose bucket has filled up again is forgotten, so the table holds
only the keys that spent something lately."""

from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    at: float  # when `tokens` was counted


class Buckets:
    """Rate limits by key, on the caller's clock (seconds, monotonic)."""

    def __init__(self, capacity: float, per_s: float) -> None:
        if capacity < 1.0 or per_s <= 0.0:
            raise ValueError(f"a bucket holds at least 1 token and fills ({capacity}, {per_s})")
        self.capacity = capacity
        self.per_s = per_s
        self._buckets: dict[str, _Bucket] = {}
        self._sweep_at = 1024  # keys held before the full buckets are forgotten

    def take(self, key: str, now: float) -> float:
        """Spend one of `key`'s tokens: 0.0 when there was one, else the seconds until
        there is (nothing spent)."""
        bucket = self._buckets.get(key)
        tokens = self.capacity if bucket is None else self._filled(bucket, now)
        if tokens >= 1.0:
            self._buckets[key] = _Bucket(tokens - 1.0, now)
            self._sweep(now)
            return 0.0
        self._buckets[key] = _Bucket(tokens, now)
        return (1.0 - tokens) / self.per_s

    def forget(self, key: str) -> None:
        self._buckets.pop(key, None)

    def __len__(self) -> int:
        return len(self._buckets)

    def _filled(self, bucket: _Bucket, now: float) -> float:
        return min(self.capacity, bucket.tokens + max(0.0, now - bucket.at) * self.per_s)

    def _sweep(self, now: float) -> None:
        """Forget the full buckets each time the table has doubled (amortised: O(1))."""
        if len(self._buckets) < self._sweep_at:
            return
        full = [key for key, b in self._buckets.items() if self._filled(b, now) >= self.capacity]
        for key in full:
            del self._buckets[key]
        self._sweep_at = max(1024, 2 * len(self._buckets))

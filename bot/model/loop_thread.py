"""`LoopThread`: one long-lived thread with its own event loop, where a library whose CPU
would stall the bot's loop does its work (LiteLLM: ~20 ms per request and ~0.5 ms per
streamed chunk, while acknowledgements wait behind it).

`run` starts a coroutine there and awaits it from the caller's loop. Text the coroutine
emits reaches the caller in batches: whatever arrived while the caller was busy, joined, so
the caller's loop wakes once per batch, not once per chunk. Cancellation crosses both ways:
a cancelled caller, or a text sink that fails, cancels the work and waits until it has
unwound (its stream closed), so nothing outlives the call. The thread starts at first use
and `close` stops and joins it; a later `run` starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from bot.model.types import TextSink

T = TypeVar("T")

# Called on the worker thread with a piece of visible text; never blocks.
Emit = Callable[[str], None]


class LoopThread:
    """A thread running an event loop of its own; `run` hands it work."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def run(self, work: Callable[[Emit], Awaitable[T]], on_text: TextSink | None = None) -> T:
        """`work(emit)` on the thread's loop; what it emits goes to `on_text`, in order and
        before its result (or its error) comes back."""
        channel: _Channel[T] = _Channel(asyncio.get_running_loop())
        worker = self._started()
        tasks: list[asyncio.Future[T]] = []

        def start() -> None:
            task = asyncio.ensure_future(work(channel.emit), loop=worker)
            tasks.append(task)
            task.add_done_callback(channel.finish)

        worker.call_soon_threadsafe(start)
        try:
            return await channel.relay(on_text)
        except BaseException:
            # `start` ran before this callback: a loop runs its callbacks in order.
            worker.call_soon_threadsafe(lambda: tasks[0].cancel())
            await channel.settled()
            raise

    async def close(self) -> None:
        """Stop the loop (work still running is cancelled and unwound) and join the thread,
        off the caller's loop."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)

    def _started(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            # Made here, so `call_soon_threadsafe` works before the thread runs it.
            loop = asyncio.new_event_loop()
            # Daemon: a process that never closed it still exits.
            thread = threading.Thread(target=_serve, args=(loop,), name=self._name, daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


class _Channel(Generic[T]):
    """Text from the worker thread to the caller's loop, and the work's outcome.

    The worker appends under a lock and wakes the caller only when the buffer was empty;
    the caller takes everything buffered at once.
    """

    def __init__(self, caller: asyncio.AbstractEventLoop) -> None:
        self._caller = caller
        self._lock = threading.Lock()
        self._texts: list[str] = []
        self._waking = False
        self._ready = asyncio.Event()
        self._outcome: asyncio.Future[T] = caller.create_future()

    def emit(self, text: str) -> None:  # worker thread
        with self._lock:
            self._texts.append(text)
            if self._waking:
                return
            self._waking = True
        self._to_caller(self._ready.set)

    def finish(self, task: asyncio.Future[T]) -> None:  # worker thread, the work is done
        self._to_caller(self._settle, task)

    async def relay(self, on_text: TextSink | None) -> T:
        while True:
            await self._ready.wait()
            self._ready.clear()
            done = self._outcome.done()  # before taking: text emitted before the end is in
            text = self._take()
            if text and on_text is not None:
                await on_text(text)
            if done:
                return self._outcome.result()

    async def settled(self) -> None:
        """Until the work has ended (it was told to stop); its outcome no longer matters."""
        await asyncio.wait({self._outcome})
        if not self._outcome.cancelled():
            self._outcome.exception()  # retrieved: no "never retrieved" warning

    def _take(self) -> str:
        with self._lock:
            texts, self._texts = self._texts, []
            self._waking = False
        return "".join(texts)

    def _settle(self, task: asyncio.Future[T]) -> None:  # caller's loop
        if task.cancelled():
            self._outcome.cancel()
        elif (error := task.exception()) is not None:
            self._outcome.set_exception(error)
        else:
            self._outcome.set_result(task.result())
        self._ready.set()

    def _to_caller(self, callback: Callable[..., None], *args: Any) -> None:
        # The caller's loop may be gone (a test ended, the bot stopped): nobody waits.
        with contextlib.suppress(RuntimeError):
            self._caller.call_soon_threadsafe(callback, *args)

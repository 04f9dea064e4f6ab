from tests.test_streaming import *  # noqa
from tests.test_streaming import test_an_expired_stream_is_finished_and_the_turn_goes_on_in_a_new_one as orig

async def test_dbg(world):
    try:
        await orig(world)
    finally:
        for c in world.slack.calls:
            if c.method.startswith("chat") or c.method.startswith("reactions"):
                print(c.method, c.status, c.response.get("error"), {k: (v if k!="blocks" else "...") for k,v in c.params.items()})

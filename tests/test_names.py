"""Name patterns match whole values: a trailing newline (which `$` lets through) or any
other stray character makes an argument invalid before anything reaches the cluster."""

from __future__ import annotations

import pytest

from bot.toolsets.declare import name_arg, namespace_arg
from bot.toolsets.spec import ToolArgumentError, ToolContext


@pytest.mark.parametrize("value", ["checkout-api\n", "checkout-api\nx", "Checkout", "a..b/c", ""])
def test_object_names_match_whole(value: str):
    with pytest.raises(ToolArgumentError):
        name_arg({"name": value})


@pytest.mark.parametrize("value", ["shop\n", "kube-system\n", "sh op", "SHOP"])
def test_namespaces_match_whole(value: str):
    context = ToolContext(cluster="prod", default_namespace=None)
    with pytest.raises(ToolArgumentError):
        namespace_arg({"namespace": value}, context, allow_all=False)


def test_ordinary_names_pass():
    assert name_arg({"name": "checkout-api-7d9f8b6c5-x2x9z"}) == "checkout-api-7d9f8b6c5-x2x9z"

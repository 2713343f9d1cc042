"""Unit tests for the shared guard pieces in `shared_tools.guards`: masking, call ids, the token meter, screening."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from shared_tools.bookstore import BookStore, make_tools
from shared_tools.guards import Refusal, mask_pii, screen, tool_detail, tool_event, usage_tokens, with_call_ids
from shared_tools.results import AgentLimits, Guard


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("ship to 12 Baker Street please", "ship to <address> please"),
        ("ship to 12 baker street please", "ship to <address> please"),
        ("ship to 12A Baker Street please", "ship to <address> please"),
        ('{"to":"12\\nBaker Street"}', '{"to":"<address>"}'),  # a newline as it reads inside JSON text
        ("mail ann.lee+books@example.co.uk now", "mail <email> now"),
        ("redis://:hunter2@cache:6379/0 refused", "redis://<credentials>@cache:6379/0 refused"),
        ("postgresql://app:hunter2@db/shop down", "postgresql://<credentials>@db/shop down"),
        ("https://token123@api.example.com/v1", "https://<credentials>@api.example.com/v1"),
    ],
)
def test_mask_pii_masks_addresses_emails_and_url_credentials(text: str, masked: str) -> None:
    assert mask_pii(text) == masked


@pytest.mark.parametrize(
    "text",
    ["10 x The Quiet Orchard = 165.00", "2 x Grandmother's Garden Table = 62.00", "order 4512 shipped, TRK-88"],
)
def test_mask_pii_leaves_bookstore_text_alone(text: str) -> None:
    assert mask_pii(text) == text


def test_tool_detail_masks_argument_values_before_encoding() -> None:
    """Masking encoded JSON missed an address split by a newline: the encoder had turned it into "\\n"."""
    detail = tool_detail({"note": "12\nBaker Street", "n": 1}, "ok")
    assert detail == '{"note":"<address>","n":1} -> ok'


def test_an_email_sent_as_a_tool_name_is_masked_on_the_trace_line() -> None:
    call = {"name": "ann@example.com", "args": {}, "id": "x", "type": "tool_call"}
    assert tool_event(1, call, "Unknown tool", 0.0, is_error=True).name == "<email>"  # type: ignore[arg-type]


def reply(*ids: str | None) -> AIMessage:
    calls = [{"name": "view_cart", "args": {}, "id": i, "type": "tool_call"} for i in ids]
    return AIMessage("", tool_calls=calls)


def test_call_ids_already_unique_are_kept_as_they_are() -> None:
    first = reply("call_0", "call_1")
    assert with_call_ids(first, [HumanMessage("hi")]) is first


def test_an_id_an_earlier_reply_used_gets_a_new_one() -> None:
    history = [HumanMessage("hi"), reply("call_0")]
    renamed = with_call_ids(reply("call_0", "call_1"), history)
    new_id, kept = (c["id"] for c in renamed.tool_calls)
    assert new_id is not None and new_id.startswith("call_0_") and kept == "call_1"


def test_missing_and_duplicate_ids_within_one_reply_are_made_unique() -> None:
    renamed = with_call_ids(reply(None, "a", "a"), [])
    ids = [c["id"] for c in renamed.tool_calls]
    assert ids[1] == "a" and len(set(ids)) == 3 and all(ids)


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        ({"input_tokens": 80, "output_tokens": 20, "total_tokens": 100}, 100),
        ({"input_tokens": -80, "output_tokens": -20, "total_tokens": -100}, 0),
        ({"input_tokens": 80, "output_tokens": 20, "total_tokens": 3}, 100),
        ({"input_tokens": 80, "output_tokens": 20, "total_tokens": 10**12}, 10**12),
    ],
)
def test_the_token_meter_never_pays_tokens_back(usage: dict[str, int], tokens: int) -> None:
    assert usage_tokens(AIMessage("", usage_metadata=usage)) == tokens  # type: ignore[arg-type]


def test_screen_says_which_guard_refused() -> None:
    tools = {t.name: t for t in make_tools(BookStore())}
    seen: dict[str, int] = {}
    limits = AgentLimits(max_repeats=1)

    def verdict(name: str, **args: object) -> Guard | None:
        decided = screen({"name": name, "args": args, "id": "x", "type": "tool_call"}, tools, seen, limits)
        return decided.guard if isinstance(decided, Refusal) else None

    assert verdict("nope") is Guard.UNKNOWN_TOOL
    assert verdict("check_stock", book_id="seven") is Guard.INVALID_ARGS
    assert verdict("check_stock", book_id=7) is None
    assert verdict("check_stock", book_id=7) is Guard.REPEAT


# --- an e-mail address however it is spelled -------------------------------------------------------------------------

SPELLED_ADDRESSES = [
    "alice%40example.com",
    "alice%2540example.com",
    "alice%40example%2Ecom",
    "alice%EF%BC%A0example.com",
    "alice\uff20example.com",
    "alice\ufe6bexample.com",
    "\uff41\uff4c\uff49\uff43\uff45\uff20\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0e\uff43\uff4f\uff4d",
    "ali\u200bce@exam\u200bple.com",
    "alice@\u200bexample.com",
    "alice\u200d@example\u2060.com",
    "al\u00adice@example.com",
    "alice@example\u3002com",
    "alice@example\uff0ecom",
    "alice [at] example [dot] com",
    "alice(at)example(dot)com",
    "alice {at} example.com",
    "alice<at>example.com",
    "alice&#64;example.com",
    "alice&#x40;example&#46;com",
    "alice&commat;example.com",
    "alice\\u0040example.com",
]


@pytest.mark.parametrize("spelled", SPELLED_ADDRESSES)
def test_an_email_address_is_masked_however_it_is_spelled(spelled: str) -> None:
    assert mask_pii(f"write to {spelled} today") == "write to <email> today"
    assert mask_pii(f'{{"to":"{spelled}"}}') == '{"to":"<email>"}'


@pytest.mark.parametrize(
    "text",
    [
        "3 @ 5.00 each",
        "look at example.com",
        "follow @bookshop",
        "100% sure & ready [at] noon",
        "a%40b",
        "caf\u00e9 cr\u00e8me (at) 5 pm",
        "\u3002\u3002 \uff20\uff20",
        "Tom &amp; Jerry, 50%25 off",
        "e-mail: n/a",
    ],
)
def test_text_that_only_looks_like_an_address_is_left_alone(text: str) -> None:
    assert mask_pii(text) == text


_letters = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=4, max_size=8)
_invisible = st.sampled_from(["", "", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e"])
_ats = st.sampled_from(
    ["@", "%40", "%2540", "\uff20", "\ufe6b", "&#64;", "&commat;", "\\u0040", " [at] ", "(at)", "%EF%BC%A0"]
)
_dots = st.sampled_from([".", "%2E", "\u3002", "\uff0e", "\uff61", " [dot] ", "&#46;", "&period;"])


def _letter(c: str, how: int) -> str:
    return [c, chr(ord(c) - ord("a") + 0xFF41), f"%{ord(c):02X}"][how]


@st.composite
def spelled_addresses(draw: st.DrawFn) -> str:
    """An address in some spelling a mail client or browser reads as one."""
    words = [draw(_letters), draw(_letters), draw(_letters)]
    pieces: list[str] = []
    for index, word in enumerate(words):
        if index:
            pieces.append(draw(_ats) if index == 1 else draw(_dots))
        pieces += [_letter(c, draw(st.sampled_from([0, 0, 0, 1, 2]))) for c in word]
    return "".join(p + draw(_invisible) for p in pieces)


@settings(max_examples=300, deadline=None)
@given(
    spelled=spelled_addresses(),
    before=st.sampled_from(["", "MAIL ", "TO: ", '{"TO":"', "(", "\n"]),
    after=st.sampled_from(["", " NOW", '"}', ")", ", THANKS", "\n"]),
)
def test_no_word_of_a_spelled_address_survives_the_mask(spelled: str, before: str, after: str) -> None:
    masked = mask_pii(before + spelled + after)
    assert masked == before + "<email>" + after, (spelled, masked)
    assert mask_pii(masked) == masked


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs", "Nd"), blacklist_characters="@\uff20\ufe6b%&\\")))
def test_text_with_no_spelling_of_an_at_sign_is_never_changed(text: str) -> None:
    assert mask_pii(text) == text

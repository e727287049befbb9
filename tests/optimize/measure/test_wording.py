"""Whether a changed instruction is wording only, without a model: the same actions, objects and
recipients, numbers, units, negations, comparatives and quantifiers, or each difference named."""

from __future__ import annotations

from optimize.measure.wording import differences

PAGE = "4. If the status is red, page the on-call engineer."


def test_rewording_reordering_renumbering_and_listed_synonyms_are_wording():
    same = [
        (PAGE, "5. If the status is red, page the engineer on call."),
        (
            "Quotes stay valid for 24 hours; say so only when asked.",
            "Quotes remain valid for 24 hours; say so only when asked.",
        ),
        (
            "Never deploy on a Friday after 16:00 local time.",
            "Do not deploy on Fridays after 16:00 local time.",
        ),
        (
            "If the amount is over 10000 EUR, ask a manager to approve.",
            "If the amount exceeds 10000 EUR, ask a manager to approve.",
        ),
        ("Notify the privacy team within 72 hours.", "Within 72 hours, inform the privacy team."),
        ("# Freedonia VAT", "# Freedonia VAT rates"),  # a heading names a section
    ]
    for old, new in same:
        assert differences(old, new) == (), new


def test_another_action_or_recipient_is_named_whatever_else_stays():
    assert differences(PAGE, "4. If the status is red, post in the ops channel.") == (
        "actions, objects or recipients: page, on-call, engineer -> post, ops, channel",
    )
    assert differences(PAGE, PAGE.replace("engineer", "manager")) == (
        "actions, objects or recipients: engineer -> manager",
    )
    assert differences(PAGE, PAGE.replace("page", "email")) == (
        "actions, objects or recipients: page -> email",
    )


def test_the_same_words_sending_other_things_to_other_people_are_named():
    """A bag of words cannot see these: every word stays, who gets what changes."""
    swaps = [
        (
            "Page the on-call engineer, then email the manager.",
            "Email the on-call engineer, then page the manager.",
            "who gets what: page -> on-call engineer, email -> manager => "
            "email -> on-call engineer, page -> manager",
        ),
        (
            "Escalate to security, not to support.",
            "Escalate to support, not to security.",
            "who gets what: escalate -> security, not escalate -> support => "
            "not escalate -> security, escalate -> support",
        ),
        (
            "Send the report to finance and the invoice to legal.",
            "Send the report to legal and the invoice to finance.",
            "who gets what: send report -> finance, send invoice -> legal => "
            "send invoice -> finance, send report -> legal",
        ),
    ]
    for old, new, said in swaps:
        assert differences(old, new) == (said,), new


def test_active_and_passive_name_the_same_recipient():
    assert differences(PAGE, "4. If the status is red, the on-call engineer is paged.") == ()


def test_numbers_units_negations_comparatives_and_quantifiers_are_named():
    fees = "Mention that transfers under 1000 EUR have no fees."
    assert differences(fees, fees.replace("under", "over")) == ("comparatives: under -> over",)
    assert differences(fees, fees.replace("under", "at least")) == ("comparatives: under -> at least",)
    assert differences(fees, fees.replace("1000", "10")) == ("numbers: 1000 -> 10",)
    assert differences(fees, fees.replace("EUR", "USD")) == ("units: EUR -> USD",)
    assert differences(fees, fees.replace("have no fees", "have fees")) == ("negations: no -> nothing",)
    owners = 'List "Action items" with an owner each.'
    assert differences(owners, owners.replace(" each", "")) == ("quantifiers: each -> nothing",)
    assert differences("Go only when green.", "Go when green.") == ("quantifiers: only -> nothing",)
    assert differences("Deploy after 16:00.", "Deploy before 16:00.") == ("comparatives: after -> before",)


def test_an_added_or_removed_instruction_is_never_wording():
    assert differences("", "NEW-MARK: group the changes by theme.") != ()
    assert differences("Open a change ticket with `open_ticket`.", "") != ()

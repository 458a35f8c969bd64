"""The closed list of units an answer may carry (`18 dollars`, `6\\text{ cm}`, `\\$4.50`).

A unit is compared as a unit: an answer in cents never equals one in dollars. Every spelling
maps to one canonical name; a word not listed here is not a unit (so "thousand", "dozen",
"apples" make an answer unparsed in the strict grammar, instead of being dropped).
"""

from __future__ import annotations

_SPELLINGS = {
    "dollar": ("dollar", "dollars", "usd", "\\$"),
    "cent": ("cent", "cents"),
    "euro": ("euro", "euros"),
    "pound": ("pound", "pounds", "lb", "lbs"),
    "ounce": ("ounce", "ounces", "oz"),
    "gram": ("gram", "grams", "g"),
    "kilogram": ("kilogram", "kilograms", "kg"),
    "milligram": ("milligram", "milligrams", "mg"),
    "ton": ("ton", "tons"),
    "millimeter": ("millimeter", "millimeters", "mm"),
    "centimeter": ("centimeter", "centimeters", "cm"),
    "meter": ("meter", "meters", "metre", "metres", "m"),
    "kilometer": ("kilometer", "kilometers", "km"),
    "inch": ("inch", "inches", "in"),
    "foot": ("foot", "feet", "ft"),
    "yard": ("yard", "yards", "yd"),
    "mile": ("mile", "miles", "mi"),
    "liter": ("liter", "liters", "litre", "litres", "l"),
    "milliliter": ("milliliter", "milliliters", "ml"),
    "gallon": ("gallon", "gallons", "gal"),
    "second": ("second", "seconds", "sec", "secs", "s"),
    "minute": ("minute", "minutes", "min", "mins"),
    "hour": ("hour", "hours", "hr", "hrs", "h"),
    "day": ("day", "days"),
    "week": ("week", "weeks"),
    "month": ("month", "months"),
    "year": ("year", "years"),
    "mph": ("mph",),
    "degree": ("degree", "degrees"),
    "unit": ("unit", "units"),
    "unit^2": ("square unit", "square units", "sq unit", "sq units"),  # the same name as `units^2`
}

UNITS: dict[str, str] = {s: name for name, spellings in _SPELLINGS.items() for s in spellings}
# bare single letters are variables; these spellings are units only inside \text{}/\mathrm{}
SHORT = {s for s in UNITS if len(s) == 1}


def unit_name(word: str, in_text: bool) -> str | None:
    """The canonical unit a spelling names (case-blind; squares and cubes keep their power),
    or None when the word is not a listed unit."""
    w = " ".join(word.lower().split())
    power = ""
    for suffix in ("^2", "^{2}", "^3", "^{3}"):
        if w.endswith(suffix):
            w, power = w[: -len(suffix)].strip(), "^" + suffix.strip("^{}")
    if w.startswith(("square ", "sq ")) and w not in UNITS:
        w, power = w.split(" ", 1)[1], "^2"
    if w.startswith("cubic ") and w not in UNITS:
        w, power = w.split(" ", 1)[1], "^3"
    name = UNITS.get(w)
    if name is None or (w in SHORT and not in_text):
        return None
    return name + power

import inspect
import random

import reasoning_gym.arithmetic.basic_arithmetic as basic_arithmetic

from sapo_env.scoring import rg_fixes

rg_fixes.load_reasoning_gym()  # installs the fixes


def original_find_common_divisors():
    """reasoning-gym's own function, re-created from its source."""
    import reasoning_gym.arithmetic.basic_arithmetic as module

    source = inspect.getsource(module).split("def find_common_divisors", 1)[1]
    source = "def find_common_divisors" + source.split("\ndef ", 1)[0]
    namespace: dict = {}
    exec(source, namespace)
    return namespace["find_common_divisors"]


def test_fix_is_installed():
    assert basic_arithmetic.find_common_divisors is rg_fixes.find_common_divisors


def test_same_divisors_in_the_same_order():
    original = original_find_common_divisors()
    rng = random.Random(0)
    cases = [(0, 0), (0, 7), (12, 0), (-36, 24), (49, 0), (1, 1), (2**10, 2**6)]
    cases += [(rng.randint(-10**6, 10**6), rng.choice([0, rng.randint(1, 10**4)]))
              for _ in range(2000)]
    for a, b in cases:
        assert rg_fixes.find_common_divisors(a, b) == original(a, b), (a, b)


def test_a_product_of_five_four_digit_numbers_is_quick():
    # trial division would take ~1e9 steps here (hours); a failure shows as a hang
    product = 9973 * 9967 * 9949 * 9941 * 9931
    divisors = rg_fixes.find_common_divisors(product, 0)
    assert divisors[:2] == [1, product] and len(divisors) == 32

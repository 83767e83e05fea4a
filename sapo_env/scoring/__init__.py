"""Scoring answers: extracting a completion's answer (``answers``), the reasoning-gym
datasets a question is scored against (``datasets``), scoring it with reasoning-gym's
verifiers under a time and size budget (``guard``, ``jobs``, ``round_scoring``,
``process_scoring``), the parsers that replace the verifiers that would execute answer text
(``safe_parsing``, ``safe_scorers``, ``sympy_whitelist``), and fixes to reasoning-gym that
keep long runs alive (``rg_fixes``). Every answer here is untrusted text: it is read, never
executed."""

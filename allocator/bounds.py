"""What a job can physically do, as the one set of bounds its numbers are held to: the
agent protocol refuses a message past them (agents/protocol.py), and a job's learned curve
is clamped to them (scheduler/curves.py), so that no number a job reports can make a plan's
arithmetic overflow, divide by zero or never end (issue 37, finding 1).

Each bound is far past anything real, so that no real job meets one: a count of 2^53 steps
is 285 years at a million steps a second, and no node trains or loads 10^8 samples a
second. Within them every product and quotient a plan takes stays finite in a float."""

MAX_COUNT = 2**53 - 1  # iterations, samples, steps, generations: exact in a float
MAX_SECONDS = 7 * 86_400.0  # any one duration a job reports: a week
MAX_SAMPLES_PER_S = 1e8  # a job's rate, and one loader worker's
MIN_SECONDS_PER_SAMPLE = 1.0 / MAX_SAMPLES_PER_S  # the least time a sample can cost
MAX_WORKERS = 4096  # loader workers per GPU
MAX_PID = 2**22  # Linux's PID_MAX_LIMIT
MAX_WALL_CLOCK = 1e11  # seconds since the epoch (the year 5138)
# The sharpness p of a job's knee a request may give: 1, a soft bend; 64, formula 5's min.
MIN_KNEE_SHARPNESS, MAX_KNEE_SHARPNESS = 1.0, 64.0

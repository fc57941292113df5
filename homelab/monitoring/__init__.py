"""What the box really has: BMC listings parsed into typed sensors, the editable inventory built from
them, and the metric selections that panels and alert rules share."""

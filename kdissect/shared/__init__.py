"""What the faces share: table writers, atomic outputs, protected inputs,
option declarations, capture arguments, extras, the allocator tuning."""

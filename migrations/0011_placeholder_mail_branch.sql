-- Placeholder for number 11, taken by another branch of issue 14 (the mail branch needs no gap
-- to run alone). Delete this file when merging the branch that brings its own 0011.
SELECT 1;

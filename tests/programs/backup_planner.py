# Planted mistake: line 14 `boto3.client("s3", ...)` — a helper builds a new AWS SDK client for
# every file (the service model is read from disk and parsed, endpoint rules and an HTTP pool
# built), two calls below the loop that uses it.
# Expected kind: repeated-setup (fix: create the client once and reuse it).
# Scenario: plan the upload of a directory's files to S3 with presigned URLs (no network used).
import hashlib
import os
import time

import boto3


def s3_client():
    return boto3.client(  # CULPRIT
        "s3", region_name="eu-west-1", aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="example"
    )


def presign(path, data):
    s3 = s3_client()
    key = "backup/" + os.path.basename(path)
    digest = hashlib.md5(data).hexdigest()
    return key, s3.generate_presigned_url("put_object", Params={"Bucket": "backups", "Key": key, "ContentMD5": digest}, ExpiresIn=600)


def main():
    end = time.time() + 4
    n = 0
    while time.time() < end:
        presign(f"/data/file{n}.bin", os.urandom(4096))
        n += 1
    print(n, "uploads planned")


main()

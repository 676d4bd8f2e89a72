"""In the node tier's app-client pod (identity.yaml): boto3 as an application uses it, with only
the environment of the Bucket's identity ConfigMap (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE,
AWS_ENDPOINT_URL*, AWS_REGION, BUCKET_NAME) and the tier's CA (AWS_CA_BUNDLE): botocore's web
identity provider exchanges the pod's token at STS, then S3 PUT and GET and STS
GetCallerIdentity with the session. Prints "<body read back> <caller ARN>"; any error fails."""
import os

import boto3
from botocore.config import Config

bucket = os.environ["BUCKET_NAME"]
s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
s3.put_object(Bucket=bucket, Key="from-boto3.txt", Body=b"written-by-boto3")
body = s3.get_object(Bucket=bucket, Key="from-boto3.txt")["Body"].read().decode()
print(body, boto3.client("sts").get_caller_identity()["Arn"])

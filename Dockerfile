# Container images for the gateway (`pgvs3`) and the operator (`pgvs3-operator`).
#
#   docker build --target gateway  -t ghcr.io/pgvs3/pgvs3:dev .
#   docker build --target operator -t ghcr.io/pgvs3/pgvs3-operator:dev .
#
# Both run as the distroless "nonroot" user (65532) on a read-only root filesystem. The gateway
# image has no PostgreSQL server in it: in Kubernetes it always gets --database-url (PGVS3_DATABASE_URL).

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin pgvs3 --bin pgvs3-operator \
    && mkdir -p /out && cp target/release/pgvs3 target/release/pgvs3-operator /out/

FROM gcr.io/distroless/cc-debian12:nonroot AS gateway
COPY --from=build /out/pgvs3 /usr/local/bin/pgvs3
USER 65532:65532
EXPOSE 9000 9090
ENTRYPOINT ["/usr/local/bin/pgvs3"]
CMD ["serve"]

FROM gcr.io/distroless/cc-debian12:nonroot AS operator
COPY --from=build /out/pgvs3-operator /usr/local/bin/pgvs3-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/pgvs3-operator"]
CMD ["run"]
